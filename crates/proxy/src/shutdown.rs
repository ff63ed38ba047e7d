//! The process's shutdown phases, shared by the listeners and the upgraded connections: serving, draining, stopping.

use tokio::sync::watch;

/// Where a process is in its shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    /// Told to stop: readiness fails so load balancers move away, but requests are still
    /// served on every connection.
    Draining,
    /// Listeners close, idle keep-alive connections close, requests in flight finish.
    Stopping,
}

/// Moves every server of the process through the shutdown phases.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<Phase>);

impl ShutdownTrigger {
    /// Enters [`Phase::Draining`] (no-op once stopping).
    pub fn drain(&self) {
        self.0.send_if_modified(|phase| {
            let changed = *phase == Phase::Serving;
            if changed {
                *phase = Phase::Draining;
            }
            changed
        });
    }

    /// Enters [`Phase::Stopping`]. Dropping the trigger does the same.
    pub fn stop(&self) {
        let _ = self.0.send(Phase::Stopping);
    }
}

/// Tells servers to drain and stop. Cloned into every server of the process.
#[derive(Clone, Debug)]
pub struct ShutdownSignal(watch::Receiver<Phase>);

impl ShutdownSignal {
    /// A signal and the trigger that moves it on.
    pub fn new() -> (ShutdownTrigger, Self) {
        let (sender, receiver) = watch::channel(Phase::Serving);
        (ShutdownTrigger(sender), Self(receiver))
    }

    /// Resolves once the servers should stop accepting (or the trigger is gone).
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|phase| *phase == Phase::Stopping).await;
    }

    /// Resolves once draining has begun (or the trigger is gone).
    pub async fn draining(mut self) {
        let _ = self.0.wait_for(|phase| *phase >= Phase::Draining).await;
    }
}
