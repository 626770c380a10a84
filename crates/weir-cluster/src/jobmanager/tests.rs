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
        let mut session = client.session(request).await?.into_inner();
        Ok(session.message().await?.expect("a first message"))
    })
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
            "refusing to listen for task managers on 0.0.0.0:0 without security.internal.secret"
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
        secret: Some(secret("somebody else's secret")),
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
