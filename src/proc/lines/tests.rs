use std::time::Duration;

use super::*;

#[tokio::test]
async fn lines_are_split_and_capped() {
    let input: &[u8] = b"one\ntwo\r\nthree-is-long\nfour";
    let (tx, mut rx) = line_channel(1 << 20);
    read_lines(input, 8, None, tx).await;
    let mut got = Vec::new();
    while let Some(l) = rx.recv().await {
        got.push(l);
    }
    assert_eq!(
        got,
        vec![
            StdoutLine::Line(b"one".to_vec()),
            StdoutLine::Line(b"two\r".to_vec()),
            StdoutLine::Overlong {
                len: 13,
                prefix: b"three-is-long".to_vec()
            },
            StdoutLine::Line(b"four".to_vec()),
        ]
    );
}

#[tokio::test]
async fn an_overlong_line_spanning_reads_keeps_only_a_prefix() {
    let big = vec![b'x'; 200_000];
    let mut input = big.clone();
    input.extend_from_slice(b"\nok\n");
    let (tx, mut rx) = line_channel(1 << 20);
    read_lines(&input[..], 1024, None, tx).await;
    match rx.recv().await {
        Some(StdoutLine::Overlong { len, prefix }) => {
            assert_eq!(len, 200_000);
            assert_eq!(prefix.len(), OVERLONG_PREFIX);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rx.recv().await, Some(StdoutLine::Line(b"ok".to_vec())));
}

#[tokio::test]
async fn lines_wait_for_room_in_bytes_and_one_long_line_still_passes() {
    let (tx, mut rx) = line_channel(1000);
    let reader = tokio::spawn(async move {
        for i in 0..10 {
            tx.send(StdoutLine::Line(vec![b'a' + i; 400]))
                .await
                .unwrap();
        }
        // Longer than the whole bound: it takes all the room, and passes alone.
        tx.send(StdoutLine::Line(vec![b'z'; 5000])).await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Two lines of 400 fit in 1000 bytes; the reader waits for the third.
    assert!(!reader.is_finished());
    assert_eq!(rx.rx.len(), 2);
    let mut got = Vec::new();
    while let Some(StdoutLine::Line(l)) = rx.recv().await {
        got.push(l.len());
        assert!(rx.rx.len() <= 2, "more queued than the bound");
    }
    assert_eq!(
        got,
        [400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 5000]
    );
    reader.await.unwrap();
}

#[test]
fn stderr_tail_keeps_the_end() {
    let t = StderrTail::new(5);
    t.push(b"hello ");
    t.push(b"world");
    assert_eq!(
        t.text(),
        "[aicli: 6 earlier bytes of stderr not kept]\nworld"
    );
}
