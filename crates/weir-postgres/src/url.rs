//! Connection URLs: `postgres://user:password@host:port/database`, parsed once, printed only
//! without the password.

use std::fmt;
use std::time::Duration;

use crate::error::PgError;

/// Where a PostgreSQL server is and who to log in as. `Display` and `Debug` never show the
/// password: a URL may be logged, shown in errors or in the REST API as it prints.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    pub host: String,
    pub port: u16,
    pub user: String,
    password: Option<String>,
    pub database: String,
}

impl PgUrl {
    /// Parses `postgres://` or `postgresql://` URLs: user (required), password, host (default
    /// `127.0.0.1`), port (default 5432) and database (default: the user's name). User and
    /// password may be percent-encoded. Query parameters are refused, not ignored.
    pub fn parse(url: &str) -> Result<PgUrl, PgError> {
        let bad = |why: &str| PgError::Config(format!("bad PostgreSQL URL: {why}"));
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(|| bad("expected postgres://user:password@host:port/database"))?;
        if rest.contains('?') {
            return Err(bad("query parameters (`?…`) are not supported"));
        }
        let (authority, database) = match rest.split_once('/') {
            Some((a, d)) => (a, d),
            None => (rest, ""),
        };
        let (credentials, address) = authority
            .rsplit_once('@')
            .ok_or_else(|| bad("no user (expected user@host)"))?;
        let (user, password) = match credentials.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (credentials, None),
        };
        let user = percent_decode(user).ok_or_else(|| bad("the user is not valid UTF-8"))?;
        if user.is_empty() {
            return Err(bad("no user (expected user@host)"));
        }
        let password = password
            .map(|p| percent_decode(p).ok_or_else(|| bad("the password is not valid UTF-8")))
            .transpose()?;
        let (host, port) = match address.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>()
                    .map_err(|_| bad(&format!("port `{p}` is not a number from 1 to 65535")))?,
            ),
            None => (address, 5432),
        };
        if port == 0 {
            return Err(bad("port 0 is not a port"));
        }
        let host = if host.is_empty() { "127.0.0.1" } else { host };
        let database = percent_decode(database).ok_or_else(|| bad("the database name"))?;
        Ok(PgUrl {
            host: host.to_string(),
            port,
            database: if database.is_empty() {
                user.clone()
            } else {
                database
            },
            user,
            password,
        })
    }

    /// The password, for the two clients that log in with it.
    pub(crate) fn password(&self) -> &str {
        self.password.as_deref().unwrap_or("")
    }

    /// The settings of a SQL connection. Connecting times out after 10 s, and a lost server is
    /// noticed by TCP keepalives, so a failure surfaces as an error instead of a hang.
    pub(crate) fn sql_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .application_name("weir")
            .connect_timeout(Duration::from_secs(10))
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10));
        if let Some(p) = &self.password {
            config.password(p);
        }
        config
    }

    /// Opens a SQL connection; its I/O runs as a task on the current runtime.
    pub(crate) async fn connect(&self) -> Result<tokio_postgres::Client, PgError> {
        let (client, connection) = self
            .sql_config()
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| PgError::Connection {
                url: self.to_string(),
                message: crate::error::describe(&e),
            })?;
        tokio::spawn(async move {
            // The client's calls report the connection's failure themselves.
            let _ = connection.await;
        });
        Ok(client)
    }
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let password = if self.password.is_some() { ":***" } else { "" };
        write!(
            f,
            "postgres://{}{password}@{}:{}/{}",
            self.user, self.host, self.port, self.database
        )
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgUrl({self})")
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_parses_into_its_parts_and_prints_without_the_password() {
        let url = PgUrl::parse("postgres://weir:s%40cret@127.0.0.1:5433/orders").unwrap();
        assert_eq!(url.user, "weir");
        assert_eq!(url.password(), "s@cret");
        assert_eq!(url.port, 5433);
        assert_eq!(url.database, "orders");
        assert_eq!(url.to_string(), "postgres://weir:***@127.0.0.1:5433/orders");
        assert!(!format!("{url:?}").contains("cret"));
        let defaults = PgUrl::parse("postgresql://ann@db").unwrap();
        assert_eq!((defaults.port, defaults.database.as_str()), (5432, "ann"));
    }

    #[test]
    fn a_bad_url_is_an_error_that_says_what_is_wrong_and_never_shows_the_password() {
        for (url, expect) in [
            ("mysql://a@b/c", "expected postgres://"),
            ("postgres://b:5432/c", "no user"),
            ("postgres://a:topsecret@b:99999/c", "port `99999`"),
            (
                "postgres://a:topsecret@b/c?sslmode=require",
                "query parameters",
            ),
        ] {
            let err = PgUrl::parse(url).unwrap_err().to_string();
            assert!(err.contains(expect), "{url}: {err}");
            assert!(!err.contains("topsecret"), "{err}");
        }
    }
}
