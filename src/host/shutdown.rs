//! Where the host's shutdown comes from, passed in rather than installed inside (as
//! mini-redis's `server::run(listener, shutdown)` takes it): the binary hands it the process's
//! signals, a test a channel, so a test ends a running host in-process without a signal.

use std::io;

use tokio::sync::mpsc;

use crate::platform::signals::{ShutdownSignals, SignalName};

/// What ends the host gracefully.
pub enum Shutdown {
    /// `SIGTERM`/`SIGINT` (Ctrl-C/Ctrl-Break on Windows), installed when the host starts.
    Signals,
    /// A name sent on the channel ends it as that signal would.
    Channel(mpsc::Receiver<SignalName>),
}

impl Shutdown {
    /// A shutdown a test triggers: send a name (`"SIGTERM"`) on the sender.
    pub fn channel() -> (mpsc::Sender<SignalName>, Shutdown) {
        let (tx, rx) = mpsc::channel(1);
        (tx, Shutdown::Channel(rx))
    }

    /// Starts listening (installing the handlers for [`Shutdown::Signals`], whose signals then
    /// come through a channel too). Call inside the host's runtime.
    pub(crate) fn arm(self) -> io::Result<Armed> {
        Ok(Armed(match self {
            Shutdown::Signals => ShutdownSignals::install()?.into_channel(),
            Shutdown::Channel(rx) => rx,
        }))
    }
}

/// A shutdown being listened to.
pub(crate) struct Armed(mpsc::Receiver<SignalName>);

impl Armed {
    /// The next request to end. Cancel-safe (used in `select!`). A channel whose sender is
    /// gone never ends the host: dropping a handle is not a request to stop.
    pub(crate) async fn recv(&mut self) -> SignalName {
        match self.0.recv().await {
            Some(name) => name,
            None => std::future::pending().await,
        }
    }
}
