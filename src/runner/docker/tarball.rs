//! Tars streamed into an Engine API request body: directory trees of this machine (links
//! kept as links, hard links once), with every entry's owner set to the container's
//! user, written on a blocking thread into a bounded channel (memory stays flat however
//! large the tree).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::sync::mpsc;

/// A tar being written; entries are owned by `uid:gid`.
pub struct TarWriter {
    builder: tar::Builder<ChunkWriter>,
    uid: u64,
    gid: u64,
    /// (device, inode) of files already written -> their name in the tar.
    seen: HashMap<(u64, u64), PathBuf>,
}

/// The request body side of a [`TarWriter`].
pub type TarBody = mpsc::Receiver<Result<Bytes, std::io::Error>>;

impl TarWriter {
    /// A writer and the body it feeds.
    pub fn new(uid: u64, gid: u64) -> (TarWriter, TarBody) {
        let (tx, rx) = mpsc::channel(16);
        let mut builder = tar::Builder::new(ChunkWriter {
            tx,
            buf: Vec::new(),
        });
        builder.follow_symlinks(false);
        (
            TarWriter {
                builder,
                uid,
                gid,
                seen: HashMap::new(),
            },
            rx,
        )
    }

    fn header(&self, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(self.uid);
        h.set_gid(self.gid);
        h.set_size(size);
        h.set_mtime(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        );
        h
    }

    /// A directory entry.
    pub fn dir(&mut self, path: &str, mode: u32) -> std::io::Result<()> {
        let mut h = self.header(tar::EntryType::Directory, mode, 0);
        self.builder.append_data(&mut h, path, std::io::empty())
    }

    /// A file with `data`.
    pub fn file(&mut self, path: &str, data: &[u8], mode: u32) -> std::io::Result<()> {
        let mut h = self.header(tar::EntryType::Regular, mode, data.len() as u64);
        self.builder.append_data(&mut h, path, data)
    }

    /// A symbolic link.
    pub fn symlink(&mut self, path: &str, target: &str) -> std::io::Result<()> {
        let mut h = self.header(tar::EntryType::Symlink, 0o777, 0);
        self.builder.append_link(&mut h, path, target)
    }

    /// The file at `src` (following links) as `path`.
    pub fn copy_file(&mut self, src: &Path, path: &str, mode: u32) -> std::io::Result<()> {
        let f = std::fs::File::open(src)?;
        let len = f.metadata()?.len();
        let mut h = self.header(tar::EntryType::Regular, mode, len);
        self.builder.append_data(&mut h, path, f.take(len))
    }

    /// The tree under `root` as `prefix/…`, skipping paths (relative to `root`) for which
    /// `skip` is true. Sockets, fifos and devices are left out.
    pub fn tree(
        &mut self,
        root: &Path,
        prefix: &str,
        skip: &dyn Fn(&Path) -> bool,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(root.join(&rel))?.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let rel_path = rel.join(e.file_name());
                if skip(&rel_path) {
                    continue;
                }
                let path = e.path();
                let meta = std::fs::symlink_metadata(&path)?;
                let name = Path::new(prefix).join(&rel_path);
                let mode = meta.permissions().mode() & 0o7777;
                if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&path)?;
                    let mut h = self.header(tar::EntryType::Symlink, 0o777, 0);
                    self.builder.append_link(&mut h, &name, &target)?;
                } else if meta.is_dir() {
                    let mut h = self.header(tar::EntryType::Directory, mode, 0);
                    self.builder.append_data(&mut h, &name, std::io::empty())?;
                    stack.push(rel_path);
                } else if meta.is_file() {
                    let key = (meta.dev(), meta.ino());
                    if meta.nlink() > 1
                        && let Some(first) = self.seen.get(&key).cloned()
                    {
                        let mut h = self.header(tar::EntryType::Link, mode, 0);
                        self.builder.append_link(&mut h, &name, &first)?;
                        continue;
                    }
                    if meta.nlink() > 1 {
                        self.seen.insert(key, name.clone());
                    }
                    let mut h = self.header(tar::EntryType::Regular, mode, meta.len());
                    let f = std::fs::File::open(&path)?;
                    self.builder
                        .append_data(&mut h, &name, f.take(meta.len()))?;
                }
            }
        }
        Ok(())
    }

    /// Ends the tar and sends what is left.
    pub fn finish(self) -> std::io::Result<()> {
        let mut w = self.builder.into_inner()?;
        w.flush()
    }
}

/// Sends chunks of what is written to a channel, with backpressure.
struct ChunkWriter {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 256 * 1024 {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::other("the upload was abandoned"))
    }
}

/// A [`TarBody`] as a stream (for `bollard::body_try_stream`).
pub fn stream(
    rx: TarBody,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

/// Writes a tar owned by `uid:gid` with `fill` (on a blocking thread) and streams it
/// into container `id` at `/`; `what` names the files in errors ("the workspace").
pub async fn upload<F>(
    docker: &bollard::Docker,
    id: &str,
    (uid, gid): (u64, u64),
    what: &str,
    fill: F,
) -> Result<(), super::DockerError>
where
    F: FnOnce(&mut TarWriter) -> std::io::Result<()> + Send + 'static,
{
    use super::DockerError;
    let (mut w, rx) = TarWriter::new(uid, gid);
    let writer = tokio::task::spawn_blocking(move || {
        fill(&mut w)?;
        w.finish()
    });
    let sent = docker
        .upload_to_container(
            id,
            Some(bollard::query_parameters::UploadToContainerOptions {
                path: "/".to_owned(),
                ..Default::default()
            }),
            bollard::body_try_stream(stream(rx)),
        )
        .await;
    writer
        .await
        .map_err(|e| DockerError::Work(format!("the tar writer of {what} failed: {e}")))?
        .map_err(|e| DockerError::Work(format!("cannot pack {what}: {e}")))?;
    sent.map_err(|e| DockerError::Api {
        what: format!("uploading {what} to container {id}"),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_keep_links_and_write_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        std::fs::create_dir_all(root.join("sub/.git")).unwrap();
        std::fs::write(root.join("big"), vec![7u8; 100_000]).unwrap();
        std::fs::hard_link(root.join("big"), root.join("sub/big2")).unwrap();
        std::os::unix::fs::symlink("../big", root.join("sub/link")).unwrap();
        std::fs::write(root.join("sub/.git/x"), "skip me").unwrap();
        let (mut w, mut rx) = TarWriter::new(1000, 1000);
        let collect = std::thread::spawn(move || {
            let mut all = Vec::new();
            while let Some(Ok(b)) = rx.blocking_recv() {
                all.extend_from_slice(&b);
            }
            all
        });
        w.tree(&root, "ws", &|p| p == Path::new("sub/.git"))
            .unwrap();
        w.file("ws/extra", b"hi", 0o644).unwrap();
        w.finish().unwrap();
        let bytes = collect.join().unwrap();
        // One copy of the 100 kB file, not two.
        assert!(bytes.len() < 150_000, "{}", bytes.len());
        let mut a = tar::Archive::new(&bytes[..]);
        let mut seen = Vec::new();
        for e in a.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            assert_eq!(h.uid().unwrap(), 1000);
            seen.push((
                e.path().unwrap().display().to_string(),
                h.entry_type(),
                e.link_name().unwrap().map(|l| l.display().to_string()),
            ));
        }
        assert!(seen.contains(&("ws/big".into(), tar::EntryType::Regular, None)));
        assert!(seen.contains(&(
            "ws/sub/big2".into(),
            tar::EntryType::Link,
            Some("ws/big".into())
        )));
        assert!(seen.contains(&(
            "ws/sub/link".into(),
            tar::EntryType::Symlink,
            Some("../big".into())
        )));
        assert!(!seen.iter().any(|(p, _, _)| p.contains(".git")));
        assert!(seen.iter().any(|(p, _, _)| p == "ws/extra"));
    }
}
