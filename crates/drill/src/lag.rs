//! The endpoint lag: every change of the true endpoint list reaches its consumers a fixed time later, in order.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};

use crate::PodEndpoint;

/// One endpoint list and when it is due to be published.
struct Pending {
    due: Instant,
    endpoints: Vec<PodEndpoint>,
}

/// A queue delivering each submitted endpoint list `lag` after its submission, one after the other.
pub struct LagQueue {
    lag: Duration,
    sender: mpsc::UnboundedSender<Pending>,
    task: JoinHandle<()>,
}

impl LagQueue {
    /// Starts the delivery task; `deliver` sees every list, in submission order.
    pub fn spawn<F>(lag: Duration, deliver: F) -> Self
    where
        F: FnMut(&[PodEndpoint]) + Send + 'static,
    {
        let (sender, receiver) = mpsc::unbounded_channel();
        let task = tokio::spawn(deliver_in_order(receiver, deliver));
        Self { lag, sender, task }
    }

    /// Queues a snapshot of the full endpoint list; returns when it will be delivered.
    pub fn submit(&self, endpoints: Vec<PodEndpoint>) -> Instant {
        let due = Instant::now() + self.lag;
        let _ = self.sender.send(Pending { due, endpoints });
        due
    }

    /// Delivers what is still queued, each at its time, then stops.
    pub async fn finish(self) {
        drop(self.sender);
        let _ = self.task.await;
    }
}

async fn deliver_in_order<F>(mut receiver: mpsc::UnboundedReceiver<Pending>, mut deliver: F)
where
    F: FnMut(&[PodEndpoint]),
{
    while let Some(pending) = receiver.recv().await {
        tokio::time::sleep_until(pending.due).await;
        deliver(&pending.endpoints);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn endpoints(last: u8) -> Vec<PodEndpoint> {
        let address = std::net::SocketAddr::from(([127, 0, 1, last], 8080));
        vec![PodEndpoint::ready(address)]
    }

    #[tokio::test]
    async fn changes_arrive_in_order_and_no_earlier_than_the_lag() {
        let lag = Duration::from_millis(200);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let queue = LagQueue::spawn(lag, move |list| {
            record.lock().unwrap().push((Instant::now(), list.to_vec()));
        });
        let mut submitted = Vec::new();
        for last in 1..=3 {
            submitted.push((Instant::now(), endpoints(last)));
            let due = queue.submit(endpoints(last));
            assert!(due >= Instant::now() + lag - Duration::from_millis(5));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(seen.lock().unwrap().is_empty(), "nothing before the lag");
        queue.finish().await;
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        for ((sent, list), (arrived, delivered)) in submitted.iter().zip(seen.iter()) {
            assert_eq!(list, delivered, "in submission order");
            assert!(
                *arrived >= *sent + lag,
                "delivered {:?} early",
                *sent + lag - *arrived
            );
        }
    }
}
