//! `weir checkpoints list|inspect|verify`: what they show and their exit status.

use crate::common::*;

#[test]
fn list_inspect_and_verify_describe_intact_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &demo_args("2s", &[]));
    assert!(out.status.success(), "{}", both(&out));
    let root = checkpoint_root(dir.path());
    let storage = local_storage(&root);
    let newest = newest(&storage);

    let list = run_in(dir.path(), &["checkpoints", "list", root.to_str().unwrap()]);
    assert!(list.status.success(), "{}", both(&list));
    let listing = text(&list.stdout);
    for column in ["id", "completed (UTC)", "size", "incremental", "status"] {
        assert!(listing.contains(column), "{listing}");
    }
    assert_eq!(listing.matches(" ok").count(), 3, "{listing}");

    let chk = root.join(format!("demo/chk-{newest}"));
    let inspect = run_in(
        dir.path(),
        &["checkpoints", "inspect", chk.to_str().unwrap()],
    );
    assert!(inspect.status.success(), "{}", both(&inspect));
    let shown = text(&inspect.stdout);
    for part in [
        "operator 'spend-per-user' (parallelism 2)",
        "subtask 1",
        "key groups [0, 64)",
        "key groups [64, 128)",
        "incremental manifest",
        "shared/",
        "operator state, inline in _metadata",
    ] {
        assert!(shown.contains(part), "{part} missing in {shown}");
    }
    // The demo's private state (manifests, sources' positions) is small: it is inline, and a
    // checkpoint's directory holds nothing but its `_metadata`.
    assert_eq!(files_under(&chk), ["_metadata".to_string()].into());

    let verify = run_in(
        dir.path(),
        &["checkpoints", "verify", chk.to_str().unwrap()],
    );
    assert!(verify.status.success(), "{}", both(&verify));
    let report = text(&verify.stdout);
    assert!(
        report.contains("1 checkpoint(s) intact, 0 damaged"),
        "{report}"
    );
    assert!(report.contains(" inline state(s) intact"), "{report}");
    let verify = run_in(
        dir.path(),
        &["checkpoints", "verify", root.to_str().unwrap()],
    );
    assert!(verify.status.success(), "{}", both(&verify));
    assert!(text(&verify.stdout).contains("3 checkpoint(s) intact, 0 damaged"));
}

#[test]
fn verify_of_a_bad_path_is_a_clear_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        ["checkpoints", "verify", "/no/such/dir"],
        ["checkpoints", "inspect", "/no/such/dir"],
        ["checkpoints", "list", "gs://bucket/x"],
    ] {
        let out = run_in(dir.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{}", both(&out));
        assert!(text(&out.stderr).starts_with("error: "), "{}", both(&out));
    }
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = run_in(
        dir.path(),
        &["checkpoints", "verify", empty.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(
        text(&out.stderr).contains("no checkpoints"),
        "{}",
        both(&out)
    );
}
