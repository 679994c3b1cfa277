use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::AsyncReadExt;

use super::http::expand;
use super::stdio::LineCap;

async fn read_capped(data: &[u8], cap: usize) -> (std::io::Result<Vec<u8>>, bool) {
    let tripped = Arc::new(AtomicBool::new(false));
    let mut r = LineCap::new(
        tokio::io::BufReader::with_capacity(7, data),
        cap,
        tripped.clone(),
    );
    let mut out = Vec::new();
    let res = r.read_to_end(&mut out).await.map(|_| out);
    (res, tripped.load(Ordering::SeqCst))
}

#[tokio::test]
async fn lines_up_to_the_cap_pass_a_longer_one_fails_wherever_it_is() {
    // Lines of 10 bytes with a cap of 10, read 7 bytes at a time: all pass.
    let ok = b"0123456789\nabcdefghij\n0123456789".to_vec();
    let (res, tripped) = read_capped(&ok, 10).await;
    assert_eq!(res.unwrap(), ok);
    assert!(!tripped);
    // An 11-byte line between short ones, in one read of 64 bytes: fails.
    let bad = b"ab\n0123456789X\ncd\n";
    let tripped = Arc::new(AtomicBool::new(false));
    let mut r = LineCap::new(&bad[..], 10, tripped.clone());
    let mut buf = [0u8; 64];
    let err = r.read(&mut buf).await.unwrap_err();
    assert!(err.to_string().contains("over 10 bytes"), "{err}");
    assert!(tripped.load(Ordering::SeqCst));
    // And again on the next read.
    assert!(r.read(&mut buf).await.is_err());
    // A last line without its newline counts too.
    let (res, tripped) = read_capped(b"ab\n0123456789XYZ", 10).await;
    assert!(res.is_err() && tripped);
}

#[test]
fn header_values_expand_variables() {
    let env = BTreeMap::from([("TOKEN".to_owned(), "s3cret".to_owned())]);
    assert_eq!(expand("Bearer ${TOKEN}", &env).unwrap(), "Bearer s3cret");
    assert_eq!(expand("plain", &env).unwrap(), "plain");
    assert_eq!(
        expand("a${TOKEN}b${TOKEN}", &env).unwrap(),
        "as3cretbs3cret"
    );
    assert_eq!(expand("${NOPE}", &env).unwrap_err(), "NOPE");
    assert_eq!(expand("${open", &env).unwrap(), "${open");
}
