//! The data plane between two task managers on loopback: credits, closing, bad peers, peers
//! without the cluster's secret.

use super::frame::{hello, write_header, DATA};
use super::*;
use crossbeam_channel::RecvTimeoutError;
use weir_core::{Element, OperatorId};
use weir_runtime::remote::{remote_receiver, remote_sink};

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
        DataPlane::bind(loopback, secret.clone()).unwrap(),
        DataPlane::bind(loopback, secret).unwrap(),
    );
    let plan = plan(a.address(), b.address());
    let (net_a, net_b) = (a.open_attempt("a", &plan), b.open_attempt("b", &plan));
    (a, b, net_a, net_b)
}

fn secret() -> ClusterSecret {
    ClusterSecret::new(b"the cluster's own secret", "test").unwrap()
}

/// Sends `element` on a thread; the receiver hears when the send returned.
type Sink = Arc<Mutex<Box<dyn weir_runtime::channel::ChannelSink<u64>>>>;

fn send_async(
    sink: Sink,
    element: Element<u64>,
) -> crossbeam_channel::Receiver<Result<(), TaskError>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(sink.lock().unwrap().send(element));
    });
    rx
}

#[test]
fn a_producer_sends_only_as_many_batches_as_its_consumer_granted_credits() {
    let (_a, _b, net_a, net_b) = two_planes();
    assert!(net_a.is_local(producer()) && !net_a.is_local(consumer()));
    let (rx, decoder) = remote_receiver::<u64, u64>(2, |x| x);
    let credit = net_b.incoming(KEY, producer(), 2, decoder).unwrap();
    let sink: Sink = Arc::new(Mutex::new(remote_sink::<u64>(
        net_a.outgoing(KEY, consumer()).unwrap(),
    )));

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
    credit();
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
fn closing_the_attempt_releases_a_producer_waiting_for_credit() {
    let (a, _b, net_a, net_b) = two_planes();
    let (_rx, decoder) = remote_receiver::<u64, u64>(1, |x| x);
    let _credit = net_b.incoming(KEY, producer(), 1, decoder).unwrap();
    let sink: Sink = Arc::new(Mutex::new(remote_sink::<u64>(
        net_a.outgoing(KEY, consumer()).unwrap(),
    )));
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
    let _credit = net_b.incoming(KEY, producer(), 1, decoder).unwrap();
    let sink = remote_sink::<u64>(net_a.outgoing(KEY, consumer()).unwrap());
    sink.send(Element::EndOfInput).unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Element::EndOfInput
    ));
}

#[test]
fn a_frame_longer_than_any_batch_ends_the_connection_instead_of_allocating_it() {
    let (_a, b, _net_a, net_b) = two_planes();
    let (_rx, decoder) = remote_receiver::<u64, u64>(1, |x| x);
    let _credit = net_b.incoming(KEY, producer(), 1, decoder).unwrap();
    let mut raw = TcpStream::connect(b.address()).unwrap();
    raw.write_all(&hello(3, "a")).unwrap();
    let mut frame = [0u8; FRAME_HEADER];
    write_header(&mut frame, DATA, KEY, u32::MAX);
    raw.write_all(&frame).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The plane sends the first credits, then drops the connection.
    let mut all = Vec::new();
    raw.read_to_end(&mut all)
        .expect("the plane closes the connection (no read timeout)");
    assert_eq!(all.len(), FRAME_HEADER, "only the credit frame came back");
}

#[test]
fn planes_that_share_the_secret_carry_records() {
    let (_a, _b, net_a, net_b) = two_planes_with(Some(secret()));
    let (rx, decoder) = remote_receiver::<u64, u64>(1, |x| x);
    let _credit = net_b.incoming(KEY, producer(), 1, decoder).unwrap();
    let sink = remote_sink::<u64>(net_a.outgoing(KEY, consumer()).unwrap());
    sink.send(Element::Records(vec![7, 8])).unwrap();
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Element::Records(b) if b == vec![7, 8]
    ));
}

#[test]
fn a_peer_without_the_secret_gets_only_the_challenge_and_nothing_it_sends_reaches_the_job() {
    let (_a, b, _net_a, net_b) = two_planes_with(Some(secret()));
    let (rx, decoder) = remote_receiver::<u64, u64>(4, |x| x);
    let _credit = net_b.incoming(KEY, producer(), 4, decoder).unwrap();
    let mut raw = TcpStream::connect(b.address()).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // What a producer would send without the handshake: a guess at the answer, its hello,
    // and a frame of records.
    let payload = postcard::to_allocvec(&Element::Records(vec![666u64])).unwrap();
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
    let a = DataPlane::bind(loopback, Some(secret())).unwrap();
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
    let result = sent.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(result, Err(TaskError::ChannelClosed)),
        "{result:?}"
    );
}
