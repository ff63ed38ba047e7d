//! The accept loop the test backends share: each connection in its own task, all of them closed when the backend stops.

use std::future::Future;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Accepts until the task running it is aborted, serving each connection with `serve`. The
/// connection tasks live in a `JoinSet` owned by this task, so aborting it closes every
/// connection too, as a pod that dies does.
pub(crate) async fn serve_connections<F, Fut>(listener: TcpListener, mut serve: F)
where
    F: FnMut(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(serve(stream));
    }
}
