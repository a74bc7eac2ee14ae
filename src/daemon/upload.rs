//! A bound on the large request bodies being received at once, across every
//! connection: `SubmitProof` and `Prove` carry a C1 or vanilla proofs (up to
//! `max_message_bytes` each), and without it 512 connections × 64 streams could each
//! be buffering one. [`UploadLayer`] lets at most `max_concurrent_uploads` such
//! bodies be received at a time (others wait their turn, their bytes held back by
//! HTTP/2 flow control, not buffered), and cuts a body that has not fully arrived
//! `upload_timeout_secs` after its turn came (`DEADLINE_EXCEEDED`). The slot is
//! released when the body ends, so a `Prove` that runs for minutes does not hold
//! it. Small calls (GetStatus, AwaitProof, ...) never wait here.

// tonic::Status is 176 bytes; a request body's error type is Status, as tonic requires.
#![allow(clippy::result_large_err)]

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
    time::Duration,
};

use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{
    body::BoxBody,
    codegen::{http, Bytes},
    Status,
};

/// The methods whose request bodies are large.
fn large(path: &str) -> bool {
    matches!(path, "/cuzk.v1.ProvingEngine/SubmitProof" | "/cuzk.v1.ProvingEngine/Prove")
}

/// Shared by every connection's service.
#[derive(Clone)]
pub(super) struct UploadLayer {
    slots: Arc<Semaphore>,
    timeout: Option<Duration>,
}

impl UploadLayer {
    /// `max` bodies at once (at least 1); `timeout` None = no deadline.
    pub(super) fn new(max: usize, timeout: Option<Duration>) -> Self {
        UploadLayer { slots: Arc::new(Semaphore::new(max.max(1))), timeout }
    }
}

impl<S> tower::Layer<S> for UploadLayer {
    type Service = Upload<S>;
    fn layer(&self, inner: S) -> Upload<S> {
        Upload { inner, layer: self.clone() }
    }
}

#[derive(Clone)]
pub struct Upload<S> {
    inner: S,
    layer: UploadLayer,
}

impl<S> tower::Service<http::Request<BoxBody>> for Upload<S>
where
    S: tower::Service<http::Request<BoxBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<BoxBody>) -> Self::Future {
        if !large(req.uri().path()) {
            return Box::pin(self.inner.call(req));
        }
        // The service that was polled ready is the one called, after the wait.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let permit = layer.slots.acquire_owned().await.ok();
            let deadline = layer.timeout.map(|t| (Box::pin(tokio::time::sleep(t)), t));
            let req = req.map(|inner| tonic::body::boxed(Receiving { inner, permit, deadline }));
            inner.call(req).await
        })
    }
}

/// A large request body while it is received: holds its slot until it ends (or
/// fails, or is dropped) and fails once its deadline passes.
struct Receiving {
    inner: BoxBody,
    permit: Option<OwnedSemaphorePermit>,
    deadline: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
}

impl Receiving {
    fn done(&mut self) {
        self.permit = None;
        self.deadline = None;
    }
}

impl Body for Receiving {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some((sleep, t)) = &mut this.deadline {
            if sleep.as_mut().poll(cx).is_ready() {
                let t = *t;
                this.done();
                return Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                    "the request body did not arrive within [daemon] upload_timeout_secs ({} s)",
                    t.as_secs()
                )))));
            }
        }
        let r = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if !matches!(r, Some(Ok(_))) || this.inner.is_end_stream() {
            this.done();
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    use tokio::sync::mpsc;

    use super::*;

    /// A body fed by the test: frames as they are sent, the end when the sender goes.
    struct Fed(mpsc::Receiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = Status;
        fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    fn request(path: &str) -> (mpsc::Sender<Bytes>, http::Request<BoxBody>) {
        let (tx, rx) = mpsc::channel(4);
        let req = http::Request::builder().uri(format!("http://x{path}")).body(tonic::body::boxed(Fed(rx))).unwrap();
        (tx, req)
    }

    type Reading = Pin<Box<dyn Future<Output = Result<Result<usize, Status>, std::convert::Infallible>> + Send>>;

    /// An inner service that reads the whole body: `Ok(bytes)` or the body's error.
    fn reader(
        entered: Arc<AtomicUsize>,
    ) -> impl tower::Service<
        http::Request<BoxBody>,
        Response = Result<usize, Status>,
        Error = std::convert::Infallible,
        Future = Reading,
    > + Clone {
        tower::service_fn(move |req: http::Request<BoxBody>| {
            entered.fetch_add(1, SeqCst);
            let mut body = req.into_body();
            Box::pin(async move {
                let mut n = 0;
                loop {
                    match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                        None => return Ok(Ok(n)),
                        Some(Ok(f)) => n += f.into_data().map_or(0, |d| d.len()),
                        Some(Err(e)) => return Ok(Err(e)),
                    }
                }
            }) as Reading
        })
    }

    /// One upload at a time: a second SubmitProof waits (its handler not entered)
    /// until the first body ends, while a GetStatus goes through at once.
    #[test]
    fn large_bodies_take_turns_and_small_calls_never_wait() {
        use tower::{Layer, Service, ServiceExt};
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let entered = Arc::new(AtomicUsize::new(0));
            let svc = UploadLayer::new(1, None).layer(reader(entered.clone()));
            let (a_tx, a) = request("/cuzk.v1.ProvingEngine/SubmitProof");
            let (b_tx, b) = request("/cuzk.v1.ProvingEngine/Prove");
            let (s_tx, s) = request("/cuzk.v1.ProvingEngine/GetStatus");
            let a = tokio::spawn(svc.clone().oneshot(a));
            a_tx.send(Bytes::from_static(b"first part")).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            let b = tokio::spawn(svc.clone().oneshot(b));
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(entered.load(SeqCst), 1, "the second upload waits for the first");
            drop(s_tx);
            let status = svc.clone().ready().await.unwrap().call(s).await.unwrap();
            assert_eq!(status.unwrap(), 0, "a small call goes through while an upload holds the slot");
            drop(a_tx);
            assert_eq!(a.await.unwrap().unwrap().unwrap(), 10);
            b_tx.send(Bytes::from_static(b"second")).await.unwrap();
            drop(b_tx);
            assert_eq!(b.await.unwrap().unwrap().unwrap(), 6);
            assert_eq!(entered.load(SeqCst), 3);
        });
    }

    /// A body that stops arriving is cut at the deadline with DEADLINE_EXCEEDED, and
    /// its slot goes to the next upload.
    #[test]
    fn a_body_that_stops_arriving_is_cut_and_frees_its_slot() {
        use tower::{Layer, ServiceExt};
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let entered = Arc::new(AtomicUsize::new(0));
            let svc = UploadLayer::new(1, Some(Duration::from_millis(100))).layer(reader(entered));
            let (stalled_tx, stalled) = request("/cuzk.v1.ProvingEngine/SubmitProof");
            stalled_tx.send(Bytes::from_static(b"a little")).await.unwrap();
            let e = svc.clone().oneshot(stalled).await.unwrap().unwrap_err();
            assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
            assert!(e.message().contains("upload_timeout_secs"), "{e:?}");
            let (tx, next) = request("/cuzk.v1.ProvingEngine/SubmitProof");
            drop(tx);
            let n = tokio::time::timeout(Duration::from_secs(5), svc.oneshot(next)).await;
            assert_eq!(n.expect("the slot was freed").unwrap().unwrap(), 0);
            drop(stalled_tx);
        });
    }
}
