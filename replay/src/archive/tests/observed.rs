//! An object store that passes everything to a real `InMemory` store,
//! delaying each get (as object_store's `ThrottledStore` does; gets of one
//! chosen object longer than the others) and counting gets started and finished, so
//! tests can see read-ahead at work.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use tokio::sync::Notify;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// `InMemory` with slow, counted gets.
#[derive(Debug)]
pub(super) struct ObservedStore {
    inner: InMemory,
    delay: Duration,
    slow: (String, Duration),
    started: AtomicUsize,
    done: AtomicUsize,
    notify: Notify,
}

impl ObservedStore {
    /// Each get waits `delay`, except those of objects whose name ends with
    /// `slow.0`, which wait `slow.1`.
    pub(super) fn new(delay: Duration, slow: (String, Duration)) -> ObservedStore {
        ObservedStore {
            inner: InMemory::new(),
            delay,
            slow,
            started: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            notify: Notify::new(),
        }
    }

    /// Gets started so far.
    pub(super) fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// Gets finished so far.
    pub(super) fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }

    /// Waits (up to 10 s) until `n` gets have finished.
    pub(super) async fn wait_done(&self, n: usize) {
        let wait = async {
            loop {
                let notified = self.notify.notified();
                if self.done() >= n {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} gets finished", self.done()));
    }
}

impl fmt::Display for ObservedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Observed({})", self.inner)
    }
}

impl ObjectStore for ObservedStore {
    fn put_opts<'a, 'b, 'c>(
        &'a self,
        location: &'b Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> BoxFuture<'c, PutResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.inner.put_opts(location, payload, opts)
    }

    fn put_multipart_opts<'a, 'b, 'c>(
        &'a self,
        location: &'b Path,
        opts: PutMultipartOptions,
    ) -> BoxFuture<'c, Box<dyn MultipartUpload>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.inner.put_multipart_opts(location, opts)
    }

    fn get_opts<'a, 'b, 'c>(
        &'a self,
        location: &'b Path,
        options: GetOptions,
    ) -> BoxFuture<'c, GetResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        Box::pin(async move {
            self.started.fetch_add(1, Ordering::SeqCst);
            let slow = location.as_ref().ends_with(self.slow.0.as_str());
            let delay = if slow { self.slow.1 } else { self.delay };
            tokio::time::sleep(delay).await;
            let got = self.inner.get_opts(location, options).await;
            self.done.fetch_add(1, Ordering::SeqCst);
            self.notify.notify_waiters();
            got
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_delimiter<'a, 'b, 'c>(
        &'a self,
        prefix: Option<&'b Path>,
    ) -> BoxFuture<'c, ListResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.inner.list_with_delimiter(prefix)
    }

    fn copy_opts<'a, 'b, 'd, 'c>(
        &'a self,
        from: &'b Path,
        to: &'d Path,
        options: CopyOptions,
    ) -> BoxFuture<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        'd: 'c,
        Self: 'c,
    {
        self.inner.copy_opts(from, to, options)
    }
}
