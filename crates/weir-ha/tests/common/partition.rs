//! A TCP relay between one job manager and ZooKeeper whose link can be cut and healed: a
//! network partition on loopback. While cut, every relayed connection is closed and new ones
//! are refused, so ZooKeeper hears nothing from the job manager and expires its session after
//! the session timeout, exactly as across a real partition.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct Partition {
    address: String,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Partition {
    /// Relays connections made to [`Partition::address`] to `target` (`host:port`).
    pub fn relay_to(target: &str) -> Partition {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let address = listener.local_addr().expect("relay address").to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let target = target.to_string();
        let (accept_cut, accept_open) = (cut.clone(), open.clone());
        // The thread ends with the test process.
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if accept_cut.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let mut open = accept_open.lock().unwrap();
                for stream in [&client, &server] {
                    if let Ok(s) = stream.try_clone() {
                        open.push(s);
                    }
                }
                pump(&client, &server);
                pump(&server, &client);
            }
        });
        Partition { address, cut, open }
    }

    /// Where a job manager connects instead of ZooKeeper.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Closes every relayed connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` on a thread until either closes.
fn pump(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
