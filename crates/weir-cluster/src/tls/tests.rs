//! The TLS options and files: what is accepted, and the error for each way a file or an
//! option can be wrong, naming the option and the file.

use super::testing::{write_files, Spec, TestCa};
use super::*;

fn config(pairs: &[(&str, &Path)]) -> Config {
    let mut config = Config::new();
    config.set(TLS_ENABLED_OPTION, "true").unwrap();
    for (key, path) in pairs {
        config.set(key, &path.display().to_string()).unwrap();
    }
    config
}

fn error(cert: &Path, key: &Path, ca: &Path) -> String {
    ClusterTls::from_files(cert, key, ca)
        .unwrap_err()
        .to_string()
}

#[test]
fn tls_comes_from_the_options_and_is_off_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let (cert, key, trust) = ca.files(dir.path(), "tm");
    assert!(ClusterTls::from_config(&Config::new()).unwrap().is_none());
    let mut off = Config::new();
    off.set(TLS_ENABLED_OPTION, "false").unwrap();
    assert!(ClusterTls::from_config(&off).unwrap().is_none());

    let on = config(&[
        (TLS_CERT_OPTION, &cert),
        (TLS_KEY_OPTION, &key),
        (TLS_TRUST_OPTION, &trust),
    ]);
    let tls = ClusterTls::from_config(&on).unwrap().unwrap();
    // The key is not in what gets printed.
    assert_eq!(
        format!("{tls:?}"),
        format!("ClusterTls({})", cert.display())
    );
}

#[test]
fn options_that_do_not_add_up_are_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, _, _) = TestCa::new("cluster CA").files(dir.path(), "tm");
    // Files without the switch: not silently ignored.
    let mut only_files = Config::new();
    only_files
        .set(TLS_CERT_OPTION, &cert.display().to_string())
        .unwrap();
    let e = ClusterTls::from_config(&only_files)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "security.ssl.internal.cert is set but security.ssl.internal.enabled is not true"
        ),
        "{e}"
    );
    // The switch without the files.
    let e = ClusterTls::from_config(&config(&[(TLS_CERT_OPTION, &cert)]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "security.ssl.internal.enabled is true but security.ssl.internal.key is not set"
        ),
        "{e}"
    );
    let mut unclear = Config::new();
    unclear.set(TLS_ENABLED_OPTION, "yes please").unwrap();
    let e = ClusterTls::from_config(&unclear).unwrap_err().to_string();
    assert!(
        e.contains("security.ssl.internal.enabled") && e.contains("true or false"),
        "{e}"
    );
}

#[test]
fn a_missing_file_is_named_with_its_option() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = TestCa::new("cluster CA").files(dir.path(), "tm");
    let nowhere = dir.path().join("nowhere.pem");
    let e = error(&nowhere, &key, &ca);
    assert!(
        e.starts_with(&format!(
            "cannot read security.ssl.internal.cert {}:",
            nowhere.display()
        )),
        "{e}"
    );
    let e = error(&cert, &nowhere, &ca);
    assert!(
        e.starts_with("cannot read security.ssl.internal.key "),
        "{e}"
    );
    let e = error(&cert, &key, &nowhere);
    assert!(
        e.starts_with("cannot read security.ssl.internal.trust-certificates "),
        "{e}"
    );
}

#[test]
fn files_that_are_not_what_their_option_wants_are_refused_naming_option_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = TestCa::new("cluster CA").files(dir.path(), "tm");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "this is not PEM\n").unwrap();
    let truncated = dir.path().join("truncated.pem");
    let text = std::fs::read_to_string(&cert).unwrap();
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let encrypted = dir.path().join("encrypted.key");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();

    for (e, option, file, why) in [
        (
            error(&garbage, &key, &ca),
            "cert",
            &garbage,
            "no certificate in it",
        ),
        (error(&key, &key, &ca), "cert", &key, "no certificate in it"),
        (
            error(&truncated, &key, &ca),
            "cert",
            &truncated,
            "not a PEM file of certificates",
        ),
        (
            error(&cert, &cert, &ca),
            "key",
            &cert,
            "no private key in it",
        ),
        (
            error(&cert, &garbage, &ca),
            "key",
            &garbage,
            "no private key in it",
        ),
        (
            error(&cert, &encrypted, &ca),
            "key",
            &encrypted,
            "an encrypted key must be decrypted first",
        ),
        (
            error(&cert, &key, &garbage),
            "trust-certificates",
            &garbage,
            "no certificate in it",
        ),
        (
            error(&cert, &key, &key),
            "trust-certificates",
            &key,
            "no certificate in it",
        ),
    ] {
        let head = format!("security.ssl.internal.{option} {}: ", file.display());
        assert!(e.starts_with(&head) && e.contains(why), "{e}");
    }
}

#[test]
fn a_key_of_another_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let (cert, _, trust) = ca.files(dir.path(), "tm");
    let (_, other_key, _) = ca.files(dir.path(), "other");
    let e = error(&cert, &other_key, &trust);
    assert!(
        e.starts_with(&format!(
            "security.ssl.internal.key {} does not go with security.ssl.internal.cert {}",
            other_key.display(),
            cert.display()
        )),
        "{e}"
    );
}

#[test]
fn a_certificate_the_others_would_refuse_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let ours = TestCa::new("cluster CA");
    let theirs = TestCa::new("another CA");
    let cases = [
        (
            "of another CA",
            theirs.issue("stranger"),
            "does not chain to the trusted certificates",
        ),
        (
            "expired",
            ours.issue_with(
                "old",
                Spec {
                    expired: true,
                    ..Spec::default()
                },
            ),
            "it has expired",
        ),
        (
            "for servers only",
            ours.issue_with(
                "server",
                Spec {
                    client: false,
                    ..Spec::default()
                },
            ),
            "extendedKeyUsage serverAuth and clientAuth",
        ),
        (
            "for clients only",
            ours.issue_with(
                "client",
                Spec {
                    server: false,
                    ..Spec::default()
                },
            ),
            "extendedKeyUsage serverAuth and clientAuth",
        ),
    ];
    for (what, issued, why) in cases {
        let (cert, key, trust) = write_files(dir.path(), "tm", &issued, &ours.pem());
        let e = error(&cert, &key, &trust);
        assert!(
            e.starts_with(&format!("security.ssl.internal.cert {}: the certificate is not accepted by security.ssl.internal.trust-certificates {}", cert.display(), trust.display()))
                && e.contains(why),
            "{what}: {e}"
        );
    }
    // Without extended key usages, a certificate serves both ends.
    let any = ours.issue_with(
        "any",
        Spec {
            client: false,
            server: false,
            ..Spec::default()
        },
    );
    let (cert, key, trust) = write_files(dir.path(), "tm", &any, &ours.pem());
    ClusterTls::from_files(&cert, &key, &trust).unwrap();
}

#[test]
fn a_bundle_with_several_cas_trusts_each() {
    let dir = tempfile::tempdir().unwrap();
    let old = TestCa::new("old CA");
    let new = TestCa::new("new CA");
    let bundle = format!("{}{}", old.pem(), new.pem());
    for ca in [&old, &new] {
        let (cert, key, trust) = write_files(dir.path(), "tm", &ca.issue("tm"), &bundle);
        ClusterTls::from_files(&cert, &key, &trust).unwrap();
    }
}
