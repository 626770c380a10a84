//! The secret's sources, the control plane's credential, and the data plane's handshake over
//! a real loopback connection.

use super::*;
use std::net::{TcpListener, TcpStream};

fn secret(text: &str) -> ClusterSecret {
    ClusterSecret::new(text.as_bytes(), "test").unwrap()
}

#[test]
fn a_secret_comes_from_the_option_the_file_or_the_environment_and_is_never_printed() {
    let mut config = Config::new();
    assert!(ClusterSecret::from_config(&config, None).unwrap().is_none());
    let from_env =
        ClusterSecret::from_config(&config, Some("sixteen-bytes-at-least".into())).unwrap();
    assert!(from_env.is_some());
    assert_eq!(format!("{:?}", from_env.unwrap()), "ClusterSecret(..)");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, "sixteen-bytes-at-least\n").unwrap();
    config
        .set(SECRET_FILE_OPTION, &file.display().to_string())
        .unwrap();
    let from_file = ClusterSecret::from_config(&config, None).unwrap().unwrap();
    // The line break is not part of the secret: the file and the option agree.
    let from_option = secret("sixteen-bytes-at-least");
    assert!(from_option.accepts_control(&from_file.control_credential()));

    config.set(SECRET_OPTION, "sixteen-bytes-at-least").unwrap();
    let both = ClusterSecret::from_config(&config, None).unwrap_err();
    assert!(matches!(both, SecretError::Ambiguous), "{both}");
}

#[test]
fn a_short_or_unreadable_secret_is_refused_with_what_to_do() {
    let short = ClusterSecret::new(b"hunter2", SECRET_ENV)
        .unwrap_err()
        .to_string();
    assert!(
        short.contains(SECRET_ENV) && short.contains("at least 16"),
        "{short}"
    );
    let mut config = Config::new();
    config
        .set(SECRET_FILE_OPTION, "/nonexistent/weir-secret")
        .unwrap();
    let missing = ClusterSecret::from_config(&config, None)
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("cannot read security.internal.secret-file /nonexistent/weir-secret"),
        "{missing}"
    );
}

#[test]
fn only_the_same_secret_accepts_a_control_credential() {
    let ours = secret("the cluster's own secret");
    let theirs = secret("somebody else's secret");
    assert!(ours.accepts_control(&ours.control_credential()));
    assert!(!ours.accepts_control(&theirs.control_credential()));
    for garbage in ["", "zz", "abc", "é"] {
        assert!(!ours.accepts_control(garbage), "{garbage:?}");
    }
}

#[test]
fn a_port_beyond_loopback_needs_a_secret() {
    let secured = secret("the cluster's own secret");
    let anywhere: SocketAddr = "0.0.0.0:6123".parse().unwrap();
    for loopback in ["127.0.0.1:6123", "[::1]:6123"] {
        check_bind(
            loopback.parse().unwrap(),
            None,
            None,
            "for tests",
            "do harm",
        )
        .unwrap();
    }
    check_bind(anywhere, Some(&secured), None, "for tests", "do harm").unwrap();
    let refused = check_bind(anywhere, None, None, "for tests", "do harm")
        .unwrap_err()
        .to_string();
    assert!(
        refused.starts_with(
            "refusing to listen for tests on 0.0.0.0:6123 without security.ssl.internal.enabled or security.internal.secret: anyone who reaches the port could do harm"
        ) && refused.contains("WEIR_CLUSTER_SECRET")
            && refused.contains("-D security.ssl.internal.enabled=true")
            && refused.contains("listen on loopback (127.0.0.1) only"),
        "{refused}"
    );
}

/// Runs the consumer's side of the handshake with `consumer`'s secret and the producer's with
/// `producer`'s on a loopback connection; returns both outcomes.
fn handshake(
    consumer: ClusterSecret,
    producer: ClusterSecret,
) -> (Result<(), String>, Result<(), String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let result = challenge_producer(&mut stream, &consumer);
        // A refused peer is hung up on, as the data plane does.
        drop(stream);
        result
    });
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let producer = answer_consumer(&mut stream, &producer);
    (server.join().unwrap(), producer)
}

#[test]
fn the_data_handshake_passes_with_the_same_secret_on_both_sides() {
    let (consumer, producer) = handshake(
        secret("the cluster's own secret"),
        secret("the cluster's own secret"),
    );
    consumer.unwrap();
    producer.unwrap();
}

#[test]
fn the_data_handshake_fails_on_both_sides_when_the_secrets_differ() {
    let (consumer, producer) = handshake(
        secret("the cluster's own secret"),
        secret("somebody else's secret"),
    );
    assert_eq!(
        consumer.unwrap_err(),
        "the peer does not know the cluster's secret"
    );
    assert!(producer.is_err());
}
