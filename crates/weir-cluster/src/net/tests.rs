//! The data plane between two task managers on loopback: credits, closing, bad peers, peers
//! without the cluster's secret.

use super::frame::{hello, write_header, DATA};
use super::*;
use crossbeam_channel::RecvTimeoutError;
use weir_core::{Element, OperatorId};
use weir_runtime::remote::{remote_receiver, remote_sink};

/// How long a silent peer is waited for (`heartbeat.timeout` on a task manager).
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

const KEY: ChannelKey = ChannelKey {
    edge: 0,
    producer: 0,
    consumer: 0,
};

fn producer() -> SubtaskId {
    SubtaskId::new(OperatorId::from_uid("source"), 0)
}

fn consumer() -> SubtaskId {
    SubtaskId::new(OperatorId::from_uid("sink"), 0)
}

/// The plan of attempt 3: the producer on "a" at `a`, the consumer on "b" at `b`.
fn plan(a: SocketAddr, b: SocketAddr) -> DeploymentPlan {
    DeploymentPlan {
        term: 0,
        attempt: 3,
        placement: vec![(producer(), "a".into()), (consumer(), "b".into())],
        peers: vec![("a".into(), a.to_string()), ("b".into(), b.to_string())],
        restore: None,
    }
}

/// Two task managers' data planes on loopback, with the producer on "a" and the consumer
/// on "b", and the attempt's networks opened on both.
fn two_planes() -> (DataPlane, DataPlane, Arc<AttemptNet>, Arc<AttemptNet>) {
    two_planes_with(None)
}

fn two_planes_with(
    secret: Option<ClusterSecret>,
) -> (DataPlane, DataPlane, Arc<AttemptNet>, Arc<AttemptNet>) {
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (a, b) = (
        DataPlane::bind(loopback, secret.clone(), None, PEER_TIMEOUT).unwrap(),
        DataPlane::bind(loopback, secret, None, PEER_TIMEOUT).unwrap(),
    );
    let plan = plan(a.address(), b.address());
    let (net_a, net_b) = (a.open_attempt("a", &plan), b.open_attempt("b", &plan));
    (a, b, net_a, net_b)
}

/// A consumer's priority frames, for tests that send none.
fn no_priority() -> FrameDecoder {
    Box::new(|_| Err("no priority frame expected".into()))
}

fn secret() -> ClusterSecret {
    ClusterSecret::new(b"the cluster's own secret", "test").unwrap()
}

/// Channel `KEY` from the producer on "a" to the consumer on "b", its queue holding `capacity`
/// batches: the consumer's queue, how it returns credits, and the producer's sink.
fn channel(
    net_a: &AttemptNet,
    net_b: &AttemptNet,
    capacity: usize,
) -> (
    crossbeam_channel::Receiver<Element<u64>>,
    CreditReturn,
    Sink,
) {
    let (rx, decoder) = remote_receiver::<u64, u64>(capacity, |x| x);
    let credit = net_b
        .incoming(KEY, producer(), capacity, decoder, no_priority())
        .unwrap();
    let sink: Sink = Arc::new(Mutex::new(remote_sink::<u64>(
        net_a.outgoing(KEY, consumer()).unwrap(),
    )));
    (rx, credit, sink)
}

/// Sends `element` on a thread, and flushes (a batch goes out as a frame of its own); the
/// receiver hears when the send returned.
type Sink = Arc<Mutex<Box<dyn weir_runtime::channel::ChannelSink<u64>>>>;

fn send_async(
    sink: Sink,
    element: Element<u64>,
) -> crossbeam_channel::Receiver<Result<(), TaskError>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let sink = sink.lock().unwrap();
        let _ = tx.send(sink.send(element).and_then(|()| sink.flush()));
    });
    rx
}

#[test]
fn a_producer_sends_only_as_many_batches_as_its_consumer_granted_credits() {
    let (_a, _b, net_a, net_b) = two_planes();
    assert!(net_a.is_local(producer()) && !net_a.is_local(consumer()));
    let (rx, credit, sink) = channel(&net_a, &net_b, 2);

    // Two credits: two batches go through while nobody reads.
    for batch in [vec![1, 2], vec![3]] {
        let sent = send_async(sink.clone(), Element::Records(batch));
        sent.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    }
    // The third waits: the consumer's queue is full and no credit came back.
    let third = send_async(sink.clone(), Element::Records(vec![4]));
    assert!(matches!(
        third.recv_timeout(Duration::from_millis(300)),
        Err(RecvTimeoutError::Timeout)
    ));
    // The consumer takes one batch and returns its credit: the third goes through.
    let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(matches!(first, Element::Records(b) if b == vec![1, 2]));
    credit.taken(0);
    third
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    let rest: Vec<Element<u64>> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    assert!(matches!(&rest[0], Element::Records(b) if *b == vec![3]));
    assert!(matches!(&rest[1], Element::Records(b) if *b == vec![4]));
}

#[test]
fn credits_go_back_half_a_queue_at_a_time_and_all_of_them_once_the_queue_is_empty() {
    let (_a, _b, net_a, net_b) = two_planes();
    let (rx, credit, sink) = channel(&net_a, &net_b, 6);
    let sends = |n: u64| {
        for i in 0..n {
            send_async(sink.clone(), Element::Records(vec![i]))
                .recv_timeout(Duration::from_secs(10))
                .expect("a send with credit returns")
                .unwrap();
        }
    };
    let take = || {
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        credit.taken(rx.len());
    };
    eventually("the first credits", || sink.lock().unwrap().has_room());
    sends(6);
    assert!(!sink.lock().unwrap().has_room());
    // Two taken, four still queued: fewer than half the queue's credits are owed, and they
    // stay with the consumer.
    take();
    take();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!sink.lock().unwrap().has_room(), "no credit frame for two");
    // The third makes half the queue: those three go back in one frame.
    take();
    eventually("three credits back", || sink.lock().unwrap().has_room());
    // One more batch, four queued: the next three taken make half a queue again, and the one
    // taken last goes back alone, as the queue is then empty — six credits in all, and not
    // one more.
    sends(1);
    take();
    take();
    take();
    take();
    assert!(rx.is_empty());
    sends(6);
    let seventh = send_async(sink.clone(), Element::Records(vec![7]));
    assert!(matches!(
        seventh.recv_timeout(Duration::from_millis(300)),
        Err(RecvTimeoutError::Timeout)
    ));
}

/// Waits up to 10 s for `done` to hold.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn unaligned_barrier(id: u64) -> weir_core::Barrier {
    weir_core::Barrier {
        id: weir_core::CheckpointId(id),
        timestamp_ms: 0,
        kind: weir_core::CheckpointKind::Checkpoint,
        alignment: weir_core::BarrierAlignment::Unaligned,
    }
}

#[test]
fn an_announced_barrier_overtakes_the_batches_queued_at_the_consumer_without_a_credit() {
    let (_a, _b, net_a, net_b) = two_planes();
    let (rx, decoder) = remote_receiver::<u64, u64>(2, |x| x);
    let (control, controls) = crossbeam_channel::unbounded();
    let credit = net_b
        .incoming(
            KEY,
            producer(),
            2,
            decoder,
            weir_runtime::remote::priority_receiver(control),
        )
        .unwrap();
    let sink = remote_sink::<u64>(net_a.outgoing(KEY, consumer()).unwrap());
    sink.send(Element::Records(vec![1])).unwrap();
    sink.flush().unwrap();
    sink.send(Element::Records(vec![2])).unwrap();
    sink.flush().unwrap();
    // Both credits spent and nothing read: the consumer has no room, but the announcement
    // goes out at once and reaches the consumer subtask ahead of both batches.
    assert!(!sink.has_room());
    sink.announce(unaligned_barrier(5)).unwrap();
    let control = controls.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(control, weir_runtime::control::TaskControl::PriorityBarrier(b) if b == unaligned_barrier(5)),
        "{control:?}"
    );
    assert_eq!(rx.len(), 2, "the batches are still queued behind it");
    // The barrier itself follows the batches in-band, with a credit.
    assert!(matches!(rx.recv().unwrap(), Element::Records(b) if b == vec![1]));
    credit.taken(0);
    sink.send(Element::Barrier(unaligned_barrier(5))).unwrap();
    assert!(matches!(rx.recv().unwrap(), Element::Records(b) if b == vec![2]));
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Element::Barrier(b) if b == unaligned_barrier(5)
    ));
}

#[test]
fn batches_merge_into_one_frame_until_a_barrier_a_flush_or_the_frame_target() {
    let (_a, _b, net_a, net_b) = two_planes();
    let (rx, credit, sink) = channel(&net_a, &net_b, 4);
    let sink = sink.lock().unwrap();
    eventually("the first credits", || sink.has_room());
    sink.send(Element::Records(vec![1])).unwrap();
    sink.send(Element::Records(vec![2, 3])).unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_millis(300)),
        Err(RecvTimeoutError::Timeout)
    ));
    // A barrier sends the records before it, merged into one batch (one credit), then itself.
    let barrier = weir_core::Barrier {
        alignment: weir_core::BarrierAlignment::Aligned,
        ..unaligned_barrier(3)
    };
    sink.send(Element::Barrier(barrier)).unwrap();
    assert!(matches!(rx.recv().unwrap(), Element::Records(b) if b == vec![1, 2, 3]));
    assert!(matches!(rx.recv().unwrap(), Element::Barrier(b) if b == barrier));
    credit.taken(0);
    // A flush (the producer's buffer timeout) sends what was filled.
    sink.send(Element::Records(vec![4])).unwrap();
    sink.flush().unwrap();
    assert!(matches!(rx.recv().unwrap(), Element::Records(b) if b == vec![4]));
    credit.taken(0);
    // A frame that reaches the target leaves at once.
    let per_frame = (weir_runtime::remote::FRAME_TARGET / 8) as u64;
    sink.send(Element::Records((0..per_frame).collect()))
        .unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Element::Records(b) if b.len() as u64 == per_frame
    ));
    credit.taken(0);
    sink.send(Element::EndOfInput).unwrap();
    assert!(matches!(rx.recv().unwrap(), Element::EndOfInput));
}

#[test]
fn elements_the_consumer_holds_back_count_against_the_producers_credits_when_it_asks_for_room() {
    let (_a, _b, net_a, net_b) = two_planes();
    let (rx, decoder) = remote_receiver::<u64, u64>(2, |x| x);
    let credit = net_b
        .incoming(KEY, producer(), 2, decoder, no_priority())
        .unwrap();
    let sink = remote_sink::<u64>(net_a.outgoing(KEY, consumer()).unwrap());
    eventually("the first credits", || sink.has_room());
    sink.send(Element::Records(vec![1])).unwrap();
    sink.flush().unwrap();
    assert!(sink.has_room(), "one credit left");
    // The consumer takes the batch out of the queue (its credit comes back) but holds it
    // back, as an unaligned checkpoint's capture does: two credits, two elements held.
    assert!(matches!(rx.recv().unwrap(), Element::Records(b) if b == vec![1]));
    credit.held(1);
    credit.taken(0);
    credit.held(2);
    eventually("no room while the consumer holds back two", || {
        !sink.has_room()
    });
    // A send does not wait for room, only for a credit: a producer blocked mid-batch gets
    // through to its barrier.
    sink.send(Element::Records(vec![2])).unwrap();
    sink.flush().unwrap();
    credit.held(0);
    eventually("room once the consumer handed them on", || sink.has_room());
}

#[test]
fn a_priority_frame_for_a_channel_not_deployed_yet_is_dropped_and_the_connection_keeps_serving() {
    let (_a, b, _net_a, net_b) = two_planes();
    let (rx, decoder) = remote_receiver::<u64, u64>(1, |x| x);
    let _credit = net_b
        .incoming(KEY, producer(), 1, decoder, no_priority())
        .unwrap();
    let mut raw = TcpStream::connect(b.address()).unwrap();
    let elsewhere = ChannelKey { edge: 9, ..KEY };
    let barrier = weir_runtime::wire_format::encode(&unaligned_barrier(3)).unwrap();
    let mut frame = vec![0u8; FRAME_HEADER];
    write_header(
        &mut frame,
        super::frame::PRIORITY,
        elsewhere,
        barrier.len() as u32,
    );
    frame.extend_from_slice(&barrier);
    let mut sent = hello(3, "a");
    sent.extend_from_slice(&frame);
    sent.extend_from_slice(&hello_and_records(vec![8])[hello(3, "a").len()..]);
    raw.write_all(&sent).unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Element::Records(b) if b == vec![8]
    ));
}

#[test]
fn closing_the_attempt_releases_a_producer_waiting_for_credit() {
    let (a, _b, net_a, net_b) = two_planes();
    let (_rx, _credit, sink) = channel(&net_a, &net_b, 1);
    send_async(sink.clone(), Element::Records(vec![1]))
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    let blocked = send_async(sink, Element::Records(vec![2]));
    assert!(blocked.recv_timeout(Duration::from_millis(200)).is_err());
    a.close_attempt(3);
    let result = blocked.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(result, Err(TaskError::ChannelClosed)),
        "{result:?}"
    );
}

#[test]
fn a_connection_that_is_not_weir_is_dropped_and_the_plane_keeps_serving() {
    let (_a, b, net_a, net_b) = two_planes();
    let faults = reported(&net_b);
    let mut garbage = TcpStream::connect(b.address()).unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    garbage
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(
        garbage.read(&mut buf).unwrap_or(0),
        0,
        "closed without a reply"
    );
    // A real producer still gets through.
    let (rx, decoder) = remote_receiver::<u64, u64>(1, |x| x);
    let _credit = net_b
        .incoming(KEY, producer(), 1, decoder, no_priority())
        .unwrap();
    let sink = remote_sink::<u64>(net_a.outgoing(KEY, consumer()).unwrap());
    sink.send(Element::EndOfInput).unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Element::EndOfInput
    ));
    // It named no attempt: the attempt does not fail for it.
    assert!(faults.lock().unwrap().is_empty());
}

/// A producer that says its hello to a consumer of `KEY`, then sends a frame header saying
/// `len` bytes, and `payload`: what the plane sent back until it closed the connection, and
/// what the attempt's fault report received.
fn raw_frame(len: u32, payload: &[u8]) -> (Vec<u8>, Vec<String>) {
    let (_a, b, _net_a, net_b) = two_planes();
    let faults = reported(&net_b);
    let (_rx, decoder) = remote_receiver::<u64, u64>(1, |x| x);
    let _credit = net_b
        .incoming(KEY, producer(), 1, decoder, no_priority())
        .unwrap();
    let mut raw = TcpStream::connect(b.address()).unwrap();
    let mut sent = hello(3, "a");
    let mut frame = [0u8; FRAME_HEADER];
    write_header(&mut frame, DATA, KEY, len);
    sent.extend_from_slice(&frame);
    sent.extend_from_slice(payload);
    raw.write_all(&sent).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut back = Vec::new();
    raw.read_to_end(&mut back)
        .expect("the plane closes the connection (no read timeout)");
    let faults = faults.lock().unwrap().clone();
    (back, faults)
}

#[test]
fn a_frame_longer_than_any_batch_ends_the_connection_instead_of_allocating_it() {
    let (back, faults) = raw_frame(u32::MAX, &[]);
    assert_eq!(back.len(), FRAME_HEADER, "only the credit frame came back");
    // Its consumer would never get the rest of its input: the attempt fails.
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert!(faults[0].contains("sent a malformed frame"), "{faults:?}");
}

#[test]
fn a_frame_that_does_not_decode_fails_the_attempt_with_the_cause() {
    let (_, faults) = raw_frame(3, &[0xff, 0xff, 0xff]);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert!(
        faults[0].contains("from a") && faults[0].contains("does not decode"),
        "{faults:?}"
    );
}

#[test]
fn planes_that_share_the_secret_carry_records() {
    let (_a, _b, net_a, net_b) = two_planes_with(Some(secret()));
    let (rx, decoder) = remote_receiver::<u64, u64>(1, |x| x);
    let _credit = net_b
        .incoming(KEY, producer(), 1, decoder, no_priority())
        .unwrap();
    let sink = remote_sink::<u64>(net_a.outgoing(KEY, consumer()).unwrap());
    sink.send(Element::Records(vec![7, 8])).unwrap();
    sink.flush().unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Element::Records(b) if b == vec![7, 8]
    ));
}

#[test]
fn a_peer_without_the_secret_gets_only_the_challenge_and_nothing_it_sends_reaches_the_job() {
    let (_a, b, _net_a, net_b) = two_planes_with(Some(secret()));
    let (rx, decoder) = remote_receiver::<u64, u64>(4, |x| x);
    let _credit = net_b
        .incoming(KEY, producer(), 4, decoder, no_priority())
        .unwrap();
    let mut raw = TcpStream::connect(b.address()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // What a producer would send without the handshake: a guess at the answer, its hello,
    // and a frame of records.
    let payload = weir_runtime::wire_format::encode(&Element::Records(vec![666u64])).unwrap();
    let mut frame = vec![0u8; FRAME_HEADER];
    write_header(&mut frame, DATA, KEY, payload.len() as u32);
    frame.extend_from_slice(&payload);
    let mut sent = vec![0u8; 64];
    sent.extend_from_slice(&hello(3, "a"));
    sent.extend_from_slice(&frame);
    raw.write_all(&sent).unwrap();
    let mut all = Vec::new();
    raw.read_to_end(&mut all)
        .expect("the plane closes the connection (no read timeout)");
    // The challenge, then nothing: no proof, no credits.
    assert_eq!(all.len(), 4 + crate::security::NONCE_LEN, "{all:?}");
    assert_eq!(&all[..4], b"WCHL");
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a record of a peer without the secret reached the job"
    );
}

#[test]
fn a_producer_sends_no_records_to_a_peer_that_cannot_prove_the_secret() {
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let a = DataPlane::bind(loopback, Some(secret()), None, PEER_TIMEOUT).unwrap();
    // The consumer's task manager is an impostor: it challenges, but cannot prove the secret.
    let impostor = TcpListener::bind(loopback).unwrap();
    let net_a = a.open_attempt("a", &plan(a.address(), impostor.local_addr().unwrap()));
    let received = std::thread::spawn(move || {
        let (mut conn, _) = impostor.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut challenge = b"WCHL".to_vec();
        challenge.extend_from_slice(&[7u8; crate::security::NONCE_LEN]);
        conn.write_all(&challenge).unwrap();
        let mut answer = [0u8; 64];
        conn.read_exact(&mut answer).unwrap();
        conn.write_all(&[0u8; 32]).unwrap();
        let mut rest = Vec::new();
        conn.read_to_end(&mut rest)
            .expect("the producer closes the connection (no read timeout)");
        rest
    });
    let sink: Sink = Arc::new(Mutex::new(remote_sink::<u64>(
        net_a.outgoing(KEY, consumer()).unwrap(),
    )));
    let sent = send_async(sink, Element::Records(vec![1, 2, 3]));
    let rest = received.join().unwrap();
    assert!(rest.is_empty(), "the impostor got {} bytes", rest.len());
    // The producer fails (and with it the attempt), naming the refusal.
    let result = sent.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(&result, Err(TaskError::Io(e)) if e.to_string().contains("does not know the cluster's secret")),
        "{result:?}"
    );
}

// Mutual TLS.

use crate::tls::testing::TestCa;

/// Two planes with certificates of `ca`, and the secret if `secret`.
fn two_tls_planes(
    dir: &std::path::Path,
    ca: &TestCa,
    secret: Option<ClusterSecret>,
) -> (DataPlane, DataPlane, Arc<AttemptNet>, Arc<AttemptNet>) {
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (a, b) = (
        DataPlane::bind(
            loopback,
            secret.clone(),
            Some(ca.tls(dir, "a")),
            PEER_TIMEOUT,
        )
        .unwrap(),
        DataPlane::bind(loopback, secret, Some(ca.tls(dir, "b")), PEER_TIMEOUT).unwrap(),
    );
    let plan = plan(a.address(), b.address());
    let (net_a, net_b) = (a.open_attempt("a", &plan), b.open_attempt("b", &plan));
    (a, b, net_a, net_b)
}

#[test]
fn planes_with_certificates_of_the_cluster_ca_carry_records_and_credits_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    for secret in [None, Some(secret())] {
        let (_a, _b, net_a, net_b) = two_tls_planes(dir.path(), &ca, secret);
        let (rx, decoder) = remote_receiver::<u64, u64>(2, |x| x);
        let credit = net_b
            .incoming(KEY, producer(), 2, decoder, no_priority())
            .unwrap();
        let sink: Sink = Arc::new(Mutex::new(remote_sink::<u64>(
            net_a.outgoing(KEY, consumer()).unwrap(),
        )));
        // Batches of every size, from one record to frames of several TLS records and more
        // than one write's worth, each through a credit that crosses back over TLS.
        let sizes = [1usize, 2_000, 40_000, 100_000, 3];
        let receiver = std::thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..sizes.len() {
                match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
                    Element::Records(batch) => got.push(batch),
                    other => panic!("{other:?}"),
                }
                credit.taken(0);
            }
            got
        });
        let mut sent = Vec::new();
        let mut next = 0u64;
        for size in sizes {
            let batch: Vec<u64> = (next..next + size as u64).collect();
            next += size as u64;
            send_async(sink.clone(), Element::Records(batch.clone()))
                .recv_timeout(Duration::from_secs(10))
                .unwrap()
                .unwrap();
            sent.push(batch);
        }
        assert_eq!(receiver.join().unwrap(), sent);
    }
}

/// A TLS client of the data port with `identity` (certificate and key; none: no certificate)
/// that trusts any server; returns what it could read after sending `bytes` (`want` bytes, or
/// to the end), or the error.
fn tls_client(
    address: SocketAddr,
    identity: Option<(&str, &str)>,
    bytes: &[u8],
    want: Option<usize>,
) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    #[derive(Debug)]
    struct AnyServer(Arc<rustls::crypto::CryptoProvider>);
    impl rustls::client::danger::ServerCertVerifier for AnyServer {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &rustls::pki_types::ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                m,
                c,
                d,
                &self.0.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                m,
                c,
                d,
                &self.0.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)));
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<_, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    let tcp = TcpStream::connect(address).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(bytes).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    match want {
        Some(n) => {
            got.resize(n, 0);
            tls.read_exact(&mut got).map_err(|e| e.to_string())?;
        }
        None => {
            tls.read_to_end(&mut got).map_err(|e| e.to_string())?;
        }
    }
    Ok(got)
}

/// What a producer would send: its hello and a frame of `records`.
fn hello_and_records(records: Vec<u64>) -> Vec<u8> {
    let payload = weir_runtime::wire_format::encode(&Element::Records(records)).unwrap();
    let mut frame = vec![0u8; FRAME_HEADER];
    write_header(&mut frame, DATA, KEY, payload.len() as u32);
    frame.extend_from_slice(&payload);
    let mut sent = hello(3, "a");
    sent.extend_from_slice(&frame);
    sent
}

#[test]
fn a_producer_without_a_certificate_of_the_cluster_ca_is_refused_and_nothing_it_sends_reaches_the_job(
) {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let (_a, b, _net_a, net_b) = two_tls_planes(dir.path(), &ca, None);
    let (rx, decoder) = remote_receiver::<u64, u64>(4, |x| x);
    let _credit = net_b
        .incoming(KEY, producer(), 4, decoder, no_priority())
        .unwrap();
    let sent = hello_and_records(vec![666]);

    // No certificate, a certificate of another CA: the handshake fails (TLS 1.3 tells the
    // client after its own end of it), and no credit comes back.
    let stranger = TestCa::new("another CA").issue("a");
    for identity in [None, Some((stranger.cert.as_str(), stranger.key.as_str()))] {
        let got = tls_client(b.address(), identity, &sent, None);
        let e = got.expect_err("the consumer accepted a stranger");
        assert!(
            e.contains("CertificateRequired")
                || e.contains("UnknownCA")
                || e.contains("BadCertificate"),
            "{e}"
        );
    }
    // Without TLS at all: dropped, nothing but a TLS alert comes back.
    let mut raw = TcpStream::connect(b.address()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(&sent).unwrap();
    let mut all = Vec::new();
    let _ = raw.read_to_end(&mut all);
    assert!(
        all.len() <= 7,
        "the plane answered {} bytes: {all:?}",
        all.len()
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a record of a stranger reached the job"
    );

    // A member gets through (so the refusals were about the certificates): its first
    // credits come back, and its record reaches the job.
    let member = ca.issue("a");
    let identity = Some((member.cert.as_str(), member.key.as_str()));
    let credits = tls_client(b.address(), identity, &sent, Some(FRAME_HEADER)).unwrap();
    assert_eq!(credits[0], super::frame::CREDIT);
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Element::Records(b) if b == vec![666]
    ));
}

/// A consumer that is not a member: a TLS server with `identity`, which accepts any client;
/// returns the plaintext the producer sent it, or the handshake's error.
fn impostor_consumer(
    identity: Option<crate::tls::testing::Issued>,
) -> (SocketAddr, std::thread::JoinHandle<Result<Vec<u8>, String>>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (mut tcp, _) = listener.accept().unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let Some(identity) = identity else {
            // Not TLS: a plain challenge, as a secret-only consumer would send.
            let mut challenge = b"WCHL".to_vec();
            challenge.extend_from_slice(&[7u8; crate::security::NONCE_LEN]);
            let _ = tcp.write_all(&challenge);
            let mut rest = Vec::new();
            let _ = tcp.read_to_end(&mut rest);
            // The producer's ClientHello is all it may get: no hello, no records.
            return Ok(rest);
        };
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            CertificateDer::pem_slice_iter(identity.cert.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap(),
            PrivateKeyDer::from_pem_slice(identity.key.as_bytes()).unwrap(),
        )
        .unwrap();
        let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut got = Vec::new();
        tls.read_to_end(&mut got).map_err(|e| e.to_string())?;
        Ok(got)
    });
    (address, handle)
}

#[test]
fn a_producer_sends_no_records_to_a_consumer_without_a_certificate_of_the_cluster_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let stranger = TestCa::new("another CA").issue("b");
    for impostor in [Some(stranger), None] {
        let plain = impostor.is_none();
        let a =
            DataPlane::bind(loopback, None, Some(ca.tls(dir.path(), "a")), PEER_TIMEOUT).unwrap();
        let (address, received) = impostor_consumer(impostor);
        let net_a = a.open_attempt("a", &plan(a.address(), address));
        let sink: Sink = Arc::new(Mutex::new(remote_sink::<u64>(
            net_a.outgoing(KEY, consumer()).unwrap(),
        )));
        let sent = send_async(sink, Element::Records(vec![1, 2, 3]));
        let received = received.join().unwrap();
        if plain {
            // Only the TLS ClientHello: no record of the job is in it.
            let bytes = received.unwrap();
            assert_eq!(bytes.first(), Some(&0x16), "not a TLS handshake: {bytes:?}");
            assert!(
                !bytes.windows(4).any(|w| w == b"WEIR"),
                "the hello went out"
            );
        } else {
            let e = received.expect_err("the impostor completed a handshake");
            assert!(
                e.contains("UnknownCA") || e.contains("BadCertificate"),
                "{e}"
            );
        }
        let result = sent.recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(
            matches!(&result, Err(TaskError::Io(e)) if e.to_string().contains("is not a member of the cluster")),
            "{result:?}"
        );
    }
}

/// What a task manager's fault report received.
fn reported(net: &AttemptNet) -> Arc<Mutex<Vec<String>>> {
    let faults = Arc::new(Mutex::new(Vec::new()));
    let into = faults.clone();
    net.report_faults(move |e| into.lock().unwrap().push(e));
    faults
}

#[test]
fn a_connection_to_a_silent_garbling_or_refused_peer_fails_the_attempt_without_a_send() {
    let (_a, _b, net, _) = two_planes();
    let faults = reported(&net);
    let silent = || Err(OutboundEnd::Silent("reading credits: timed out".into()));
    let out = Outbound::new("b");
    out.ended(silent(), "b:1", &net.faults);
    let expected = "the data connection to task manager b failed: reading credits: timed out";
    assert_eq!(*faults.lock().unwrap(), [expected]);
    // A producer that sends on it afterwards fails with the same cause.
    assert!(out.broken.load(Ordering::Acquire));
    let err = out.failure(None);
    assert!(
        matches!(&err, TaskError::Io(e) if e.to_string() == expected),
        "{err:?}"
    );

    // The attempt closing it, or a plain end, is not a fault of the attempt.
    let closing = Outbound::new("b");
    closing.closing.store(true, Ordering::Release);
    closing.ended(silent(), "b:1", &net.faults);
    assert!(matches!(closing.failure(None), TaskError::ChannelClosed));
    Outbound::new("b").ended(Err(OutboundEnd::Io("reset".into())), "b:1", &net.faults);
    Outbound::new("b").ended(Ok(()), "b:1", &net.faults);
    assert_eq!(faults.lock().unwrap().len(), 1);
    // A consumer that breaks the protocol, or is no member of the cluster, fails it too.
    let garbled = "b:1 sent a malformed frame (type 9)";
    Outbound::new("b").ended(
        Err(OutboundEnd::Protocol(garbled.into())),
        "b:1",
        &net.faults,
    );
    let refused = "the peer does not know the cluster's secret";
    Outbound::new("b").ended(
        Err(OutboundEnd::Refused(refused.into())),
        "b:1",
        &net.faults,
    );
    assert_eq!(
        faults.lock().unwrap()[1..],
        [
            format!("the data connection to task manager b failed: {garbled}"),
            format!(
                "the data connection to task manager b failed: b:1 is not a member of the \
                 cluster (its certificate or the secret): {refused}"
            )
        ]
    );

    // Once the task manager stopped listening (the attempt's subtasks ended), nothing is
    // reported, and the report's captures are released.
    net.stop_reporting_faults();
    Outbound::new("b").ended(silent(), "b:1", &net.faults);
    assert_eq!(faults.lock().unwrap().len(), 3);
    assert_eq!(Arc::strong_count(&faults), 1);
}
