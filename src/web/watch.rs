//! The web server's one inotify instance: the event streams of its pages subscribe to
//! their task's directory, and are woken when something in it changes (a line appended
//! to the record, a file replaced). One instance for all of them: the kernel allows a
//! user 128 instances by default, and a watch on a directory is shared by every page
//! that follows it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The server's watcher; `None` inside where inotify is not available (the streams
/// then poll).
#[derive(Clone, Default)]
pub(crate) struct DirWatch {
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch")
            .field("watching", &self.inner.is_some())
            .finish()
    }
}

struct Inner {
    state: Mutex<State>,
    next: AtomicU64,
}

struct State {
    watches: Watches,
    /// Who follows each watched directory.
    subscribers: HashMap<WatchDescriptor, Vec<(u64, Arc<Notify>)>>,
}

/// What a watch looks for: a change of a file's content or a file made or moved in (the
/// record rewrites files by a rename); never through a symlink.
fn mask() -> WatchMask {
    WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::CREATE
        | WatchMask::MOVED_TO
        | WatchMask::ONLYDIR
        | WatchMask::DONT_FOLLOW
}

impl DirWatch {
    /// The watcher, its events dispatched until `stop`; an inert one (every stream
    /// polls) when inotify cannot be had.
    pub(crate) fn start(stop: CancellationToken) -> DirWatch {
        let Ok(inotify) = Inotify::init() else {
            tracing::debug!("no inotify: the web view's event streams poll");
            return DirWatch::default();
        };
        let Ok(mut events) = inotify.into_event_stream(vec![0u8; 16 * 1024]) else {
            return DirWatch::default();
        };
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                watches: events.watches(),
                subscribers: HashMap::new(),
            }),
            next: AtomicU64::new(0),
        });
        let dispatch = inner.clone();
        tokio::spawn(async move {
            loop {
                let ev = tokio::select! {
                    _ = stop.cancelled() => return,
                    ev = events.next() => ev,
                };
                match ev {
                    Some(Ok(e)) => dispatch.dispatch(&e.wd, e.mask),
                    // Every follower polls from now on.
                    _ => {
                        dispatch.wake_all_and_forget();
                        return;
                    }
                }
            }
        });
        DirWatch { inner: Some(inner) }
    }

    /// A subscription to changes in `dir`; `None` when it cannot be watched (it does not
    /// exist yet, it is a symlink, no inotify).
    pub(crate) fn subscribe(&self, dir: &Path) -> Option<Subscription> {
        let inner = self.inner.as_ref()?;
        let mut s = inner.lock();
        let wd = s.watches.add(dir, mask()).ok()?;
        let id = inner.next.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        s.subscribers
            .entry(wd.clone())
            .or_default()
            .push((id, notify.clone()));
        Some(Subscription {
            inner: inner.clone(),
            wd,
            id,
            notify,
        })
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dispatch(&self, wd: &WatchDescriptor, mask: EventMask) {
        if mask.contains(EventMask::Q_OVERFLOW) {
            // Events were lost: everyone looks.
            for subs in self.lock().subscribers.values() {
                subs.iter().for_each(|(_, n)| n.notify_one());
            }
            return;
        }
        let mut s = self.lock();
        if mask.contains(EventMask::IGNORED) {
            // The watch is gone (the directory removed): its followers poll.
            if let Some(subs) = s.subscribers.remove(wd) {
                subs.iter().for_each(|(_, n)| n.notify_one());
            }
            return;
        }
        if let Some(subs) = s.subscribers.get(wd) {
            subs.iter().for_each(|(_, n)| n.notify_one());
        }
    }

    fn wake_all_and_forget(&self) {
        let mut s = self.lock();
        for (_, subs) in s.subscribers.drain() {
            subs.iter().for_each(|(_, n)| n.notify_one());
        }
    }
}

/// One stream's interest in one directory, until dropped.
pub(crate) struct Subscription {
    inner: Arc<Inner>,
    wd: WatchDescriptor,
    id: u64,
    notify: Arc<Notify>,
}

impl Subscription {
    /// Until the directory changes (at once when it changed since the last call).
    pub(crate) async fn changed(&self) {
        self.notify.notified().await;
    }

    /// Whether the watch still stands (it ends when the directory goes).
    pub(crate) fn live(&self) -> bool {
        self.inner
            .lock()
            .subscribers
            .get(&self.wd)
            .is_some_and(|subs| subs.iter().any(|(id, _)| *id == self.id))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut s = self.inner.lock();
        let Some(subs) = s.subscribers.get_mut(&self.wd) else {
            return;
        };
        subs.retain(|(id, _)| *id != self.id);
        if subs.is_empty() {
            s.subscribers.remove(&self.wd);
            let _ = s.watches.remove(self.wd.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change in the directory wakes each of its subscribers; a dropped one's watch
    /// goes with the last subscriber; a removed directory ends the watch.
    #[tokio::test]
    async fn changes_wake_every_subscriber_of_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let stop = CancellationToken::new();
        let w = DirWatch::start(stop.clone());
        let a = w.subscribe(dir.path()).expect("inotify here");
        let b = w.subscribe(dir.path()).unwrap();
        assert_eq!(a.wd, b.wd, "one watch for the directory");
        std::fs::write(dir.path().join("events.ndjson"), "line\n").unwrap();
        let within = std::time::Duration::from_secs(5);
        tokio::time::timeout(within, a.changed()).await.expect("a woken");
        tokio::time::timeout(within, b.changed()).await.expect("b woken");
        drop(a);
        assert!(b.live());
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let c = w.subscribe(&sub).unwrap();
        std::fs::remove_dir(&sub).unwrap();
        tokio::time::timeout(within, c.changed()).await.expect("c woken");
        tokio::time::timeout(within, async {
            while c.live() {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the watch of a removed directory ends");
        assert!(w.subscribe(&dir.path().join("missing")).is_none());
        stop.cancel();
    }
}
