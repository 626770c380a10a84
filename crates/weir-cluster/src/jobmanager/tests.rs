//! The control plane's door on loopback: calls without the cluster's secret are refused before
//! anything is registered.

use super::*;
use crate::proto::job_manager_client::JobManagerClient;
use crate::proto::Register;
use crate::security::AUTH_HEADER;

fn secret(text: &str) -> ClusterSecret {
    ClusterSecret::new(text.as_bytes(), "test").unwrap()
}

fn options(secret: Option<ClusterSecret>) -> JobManagerOptions {
    JobManagerOptions {
        rpc_address: "127.0.0.1:0".parse().unwrap(),
        secret,
        tls: None,
        job_args: vec!["run".into(), "the-job".into()],
        heartbeat_interval: Duration::from_secs(1),
        heartbeat_timeout: Duration::from_secs(10),
        slot_timeout: Duration::from_secs(1),
        min_task_managers: 1,
        standby: false,
    }
}

/// What a raw gRPC client gets for registering task manager `id` with `credential` in the
/// call's metadata: the first message of the session, or the refusal.
fn register(
    address: SocketAddr,
    id: &str,
    credential: Option<&str>,
) -> Result<FromJobManager, Status> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = JobManagerClient::connect(format!("http://{address}"))
            .await
            .unwrap();
        let request = registration(id, credential);
        let mut session = client.session(request).await?.into_inner();
        Ok(session.message().await?.expect("a first message"))
    })
}

/// A session's first message, registering task manager `id` with 4 slots, with `credential`
/// in the auth header if given.
fn registration(
    id: &str,
    credential: Option<&str>,
) -> Request<tokio_stream::Iter<std::vec::IntoIter<FromTaskManager>>> {
    let register = FromTaskManager {
        kind: Some(from_task_manager::Kind::Register(Register {
            task_manager_id: id.into(),
            slots: 4,
            data_address: "127.0.0.1:1".into(),
        })),
    };
    let mut request = Request::new(tokio_stream::iter(vec![register]));
    if let Some(c) = credential {
        request
            .metadata_mut()
            .insert(AUTH_HEADER, c.parse().unwrap());
    }
    request
}

fn registered(jm: &JobManager) -> Vec<String> {
    let state = jm.shared.state.lock().unwrap();
    state.task_managers.keys().cloned().collect()
}

#[test]
fn a_task_manager_without_the_secret_or_with_a_wrong_one_is_refused_and_registers_nothing() {
    let ours = secret("the cluster's own secret");
    let jm = JobManager::start(options(Some(ours.clone()))).unwrap();

    let without = register(jm.address(), "stranger", None).unwrap_err();
    assert_eq!(without.code(), tonic::Code::Unauthenticated, "{without:?}");
    let wrong = secret("somebody else's secret").control_credential();
    let with_wrong = register(jm.address(), "impostor", Some(&wrong)).unwrap_err();
    assert_eq!(
        with_wrong.code(),
        tonic::Code::Unauthenticated,
        "{with_wrong:?}"
    );
    let garbage = register(jm.address(), "guesser", Some("00ff")).unwrap_err();
    assert_eq!(garbage.code(), tonic::Code::Unauthenticated, "{garbage:?}");
    // The job's arguments went to none of them, and none has slots to be given subtasks.
    assert!(registered(&jm).is_empty(), "{:?}", registered(&jm));

    // One that knows the secret gets in (so the refusals above were about the secret).
    let welcome = register(jm.address(), "member", Some(&ours.control_credential())).unwrap();
    let Some(from_job_manager::Kind::Registered(r)) = welcome.kind else {
        panic!("not registered: {welcome:?}");
    };
    assert_eq!(r.job_args, vec!["run".to_string(), "the-job".to_string()]);
    jm.finish("FINISHED");
}

#[test]
fn a_job_manager_without_a_secret_takes_task_managers_on_loopback() {
    let jm = JobManager::start(options(None)).unwrap();
    assert!(jm.address().ip().is_loopback());
    register(jm.address(), "local", None).unwrap();
    jm.finish("FINISHED");
}

#[test]
fn a_job_manager_refuses_to_listen_beyond_loopback_without_a_secret() {
    let mut beyond = options(None);
    beyond.rpc_address = "0.0.0.0:0".parse().unwrap();
    let Err(e) = JobManager::start(beyond) else {
        panic!("listening on 0.0.0.0 without a secret");
    };
    let e = e.to_string();
    assert!(
        e.contains(
            "refusing to listen for task managers on 0.0.0.0:0 without security.ssl.internal.enabled or security.internal.secret"
        ) && e.contains("register a task manager and receive the job's records"),
        "{e}"
    );
}

#[test]
fn a_task_manager_with_a_wrong_secret_stops_at_once_and_says_why() {
    let jm = JobManager::start(options(Some(secret("the cluster's own secret")))).unwrap();
    let options = crate::taskmanager::TaskManagerOptions {
        job_manager: jm.address().to_string(),
        id: "impostor".into(),
        slots: 1,
        data_bind: "127.0.0.1:0".parse().unwrap(),
        data_host: "127.0.0.1".into(),
        connect_timeout: Duration::from_secs(60),
        heartbeat_timeout: Duration::from_secs(10),
        secret: Some(secret("somebody else's secret")),
        tls: None,
    };
    let started = Instant::now();
    let build = |_: &[String]| -> Result<_, String> { panic!("the job was built") };
    let e = crate::taskmanager::run_task_manager(options, &build).unwrap_err();
    assert!(matches!(e, ClusterError::Config(_)), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("refused this task manager") && e.contains("WEIR_CLUSTER_SECRET"),
        "{e}"
    );
    // Not after the connect timeout: trying again cannot help.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(registered(&jm).is_empty());
    jm.finish("FINISHED");
}

// Mutual TLS.

use crate::tls::testing::{write_files, Spec, TestCa};
use crate::tls::ClusterTls;

fn tls_options(tls: ClusterTls) -> JobManagerOptions {
    JobManagerOptions {
        tls: Some(tls),
        ..options(None)
    }
}

/// What a raw gRPC client over TLS gets for registering `id`: it trusts `ca` and presents
/// `identity` (none: no certificate).
fn register_over_tls(
    address: SocketAddr,
    id: &str,
    ca: &TestCa,
    identity: Option<crate::tls::testing::Issued>,
) -> Result<FromJobManager, String> {
    register_over_tls_with(address, id, ca, identity, None)
}

/// [`register_over_tls`], with `credential` in the call's metadata.
fn register_over_tls_with(
    address: SocketAddr,
    id: &str,
    ca: &TestCa,
    identity: Option<crate::tls::testing::Issued>,
    credential: Option<&str>,
) -> Result<FromJobManager, String> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut tls = ClientTlsConfig::new()
            .domain_name("localhost")
            .ca_certificate(Certificate::from_pem(ca.pem()));
        if let Some(identity) = identity {
            tls = tls.identity(Identity::from_pem(identity.cert, identity.key));
        }
        let channel = Endpoint::from_shared(format!("https://{address}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .map_err(|e| format!("connect: {e:?}"))?;
        let mut client = JobManagerClient::new(channel);
        let request = registration(id, credential);
        let mut session = client
            .session(request)
            .await
            .map_err(|e| format!("session: {e:?}"))?
            .into_inner();
        session
            .message()
            .await
            .map_err(|e| format!("message: {e:?}"))?
            .ok_or_else(|| "no first message".to_string())
    })
}

#[test]
fn over_tls_only_a_task_manager_with_a_certificate_of_the_cluster_ca_registers_or_hears_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let jm = JobManager::start(tls_options(ca.tls(dir.path(), "jm"))).unwrap();

    let without = register_over_tls(jm.address(), "stranger", &ca, None).unwrap_err();
    let other_ca = TestCa::new("another CA").issue("impostor");
    let with_other = register_over_tls(jm.address(), "impostor", &ca, Some(other_ca)).unwrap_err();
    // A client that does not speak TLS.
    let plain = register(jm.address(), "plain", None).unwrap_err();
    assert_ne!(plain.code(), tonic::Code::Ok);
    // With TLS 1.3 the client's handshake ends before the server checked its certificate:
    // the refusal reaches it as an alert, or as a connection cut under its first request.
    for e in [&without, &with_other] {
        assert!(
            e.starts_with("session:") || e.starts_with("message:"),
            "{e}"
        );
    }
    // None of them registered, and none got the job's arguments.
    assert!(registered(&jm).is_empty(), "{:?}", registered(&jm));

    let welcome = register_over_tls(jm.address(), "member", &ca, Some(ca.issue("tm"))).unwrap();
    let Some(from_job_manager::Kind::Registered(r)) = welcome.kind else {
        panic!("not registered: {welcome:?}");
    };
    assert_eq!(r.job_args, vec!["run".to_string(), "the-job".to_string()]);
    jm.finish("FINISHED");
}

#[test]
fn with_tls_a_job_manager_may_listen_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let mut beyond = tls_options(ca.tls(dir.path(), "jm"));
    beyond.rpc_address = "0.0.0.0:0".parse().unwrap();
    JobManager::check_bind(&beyond).unwrap();
}

/// A task manager for the job manager at `jm` with `tls`, which must give up at once.
fn refused_task_manager(jm: &JobManager, job_manager: String, tls: ClusterTls) -> String {
    let options = crate::taskmanager::TaskManagerOptions {
        job_manager,
        id: "impostor".into(),
        slots: 1,
        data_bind: "127.0.0.1:0".parse().unwrap(),
        data_host: "127.0.0.1".into(),
        connect_timeout: Duration::from_secs(60),
        heartbeat_timeout: Duration::from_secs(10),
        secret: None,
        tls: Some(tls),
    };
    let started = Instant::now();
    let build = |_: &[String]| -> Result<_, String> { panic!("the job was built") };
    let e = crate::taskmanager::run_task_manager(options, &build).unwrap_err();
    assert!(matches!(e, ClusterError::Config(_)), "{e:?}");
    // Not after the connect timeout: trying again cannot help.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(registered(jm).is_empty());
    e.to_string()
}

#[test]
fn a_task_manager_and_a_job_manager_that_do_not_accept_each_others_certificates_part_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let ours = TestCa::new("cluster CA");
    let theirs = TestCa::new("another CA");
    let jm = JobManager::start(tls_options(ours.tls(dir.path(), "jm"))).unwrap();
    let address = jm.address().to_string();

    // Of another CA altogether: the task manager refuses the job manager's certificate.
    let e = refused_task_manager(&jm, address.clone(), theirs.tls(dir.path(), "tm-a"));
    assert!(
        e.contains("do not accept each other's certificates")
            && e.contains("does not chain to the trusted certificates"),
        "{e}"
    );
    // Trusting both CAs, with a certificate of the other: the job manager refuses it.
    let bundle = format!("{}{}", ours.pem(), theirs.pem());
    let (cert, key, ca) = write_files(dir.path(), "tm-b", &theirs.issue("tm-b"), &bundle);
    let tls = ClusterTls::from_files(&cert, &key, &ca).unwrap();
    let e = refused_task_manager(&jm, address, tls);
    assert!(
        e.contains("do not accept each other's certificates")
            && e.contains("does not accept this process's certificate"),
        "{e}"
    );
    jm.finish("FINISHED");
}

#[test]
fn a_task_manager_refuses_a_job_manager_whose_certificate_does_not_name_its_host() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let elsewhere = Spec {
        names: vec!["jobmanager.example".into()],
        ..Spec::default()
    };
    let (cert, key, trust) =
        write_files(dir.path(), "jm", &ca.issue_with("jm", elsewhere), &ca.pem());
    let jm_tls = ClusterTls::from_files(&cert, &key, &trust).unwrap();
    let jm = JobManager::start(tls_options(jm_tls)).unwrap();
    let e = refused_task_manager(&jm, jm.address().to_string(), ca.tls(dir.path(), "tm"));
    assert!(e.contains("does not name the host"), "{e}");
    jm.finish("FINISHED");
}

#[test]
fn with_tls_and_the_secret_a_task_manager_needs_both() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let ours = secret("the cluster's own secret");
    let jm = JobManager::start(JobManagerOptions {
        secret: Some(ours.clone()),
        ..tls_options(ca.tls(dir.path(), "jm"))
    })
    .unwrap();
    // A certificate of the CA, but no credential or a wrong one: refused by the secret's
    // check, inside TLS.
    let wrong = secret("somebody else's secret").control_credential();
    for credential in [None, Some(wrong.as_str())] {
        let e = register_over_tls_with(jm.address(), "half", &ca, Some(ca.issue("tm")), credential)
            .unwrap_err();
        assert!(e.contains("Unauthenticated"), "{e}");
    }
    // The credential without a certificate: refused in the handshake.
    let credential = ours.control_credential();
    register_over_tls_with(jm.address(), "other-half", &ca, None, Some(&credential)).unwrap_err();
    assert!(registered(&jm).is_empty(), "{:?}", registered(&jm));
    // Both: registered, and told the job.
    let welcome = register_over_tls_with(
        jm.address(),
        "member",
        &ca,
        Some(ca.issue("tm")),
        Some(&credential),
    )
    .unwrap();
    assert!(
        matches!(welcome.kind, Some(from_job_manager::Kind::Registered(_))),
        "{welcome:?}"
    );
    jm.finish("FINISHED");
}
