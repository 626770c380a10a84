//! The PostgreSQL server the tests run against: `scripts/test.sh` starts one and exports its
//! URL in `WEIR_TEST_PG` (`scripts/postgres.sh`). The tests fail, they do not skip, without it.
//! Each test gets a database of its own, so that tests running in parallel never see each
//! other's tables, slots or prepared transactions.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::url::PgUrl;

/// The server's URL.
pub(crate) fn server() -> PgUrl {
    let url = std::env::var("WEIR_TEST_PG").expect(
        "WEIR_TEST_PG is not set: run the tests with scripts/test.sh, which starts PostgreSQL",
    );
    PgUrl::parse(&url).expect("WEIR_TEST_PG is a postgres:// URL")
}

/// A fresh, empty database named after `test`, dropped first if an earlier run left it.
pub(crate) fn fresh_database(test: &str) -> PgUrl {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "t_{}_{}_{}",
        test.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(30)
            .collect::<String>(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
    .to_lowercase();
    let admin = server();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = admin.connect().await.unwrap();
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .unwrap();
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
    });
    let mut url = admin;
    url.database = name;
    url
}

/// Runs SQL statements on `url`, for a test's setup and checks.
pub(crate) fn execute(url: &PgUrl, sql: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = url.connect().await.unwrap();
        client.batch_execute(sql).await.unwrap();
    });
}

/// The rows of a query, each column as text (NULL as "NULL").
pub(crate) fn query(url: &PgUrl, sql: &str) -> Vec<Vec<String>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = url.connect().await.unwrap();
        client
            .simple_query(sql)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or("NULL").to_string())
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    })
}
