//! Connection URLs whose passwords never reach a log line.

use std::fmt;
use std::str::FromStr;

/// A validated `postgresql://` URL. `Display` and `Debug` hide the password.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    url: url::Url,
    origin: String,
}

impl PgUrl {
    /// Parses and checks a PostgreSQL URL; `PGPASSWORD` fills a missing password.
    /// `origin` says where it was configured (`source.url`, an environment
    /// variable...), for messages that tell the operator what to fix.
    pub fn parse(text: &str, origin: &str) -> Result<PgUrl, String> {
        let mut url = url::Url::parse(text.trim()).map_err(|e| {
            format!("{e}; expected a URL like postgresql://user:password@host:5432/database")
        })?;
        if !matches!(url.scheme(), "postgresql" | "postgres") {
            return Err(format!(
                "unsupported scheme {:?}: use postgresql://user:password@host:5432/database",
                url.scheme()
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err("the URL names no host: use postgresql://user@host:5432/database".into());
        }
        if url.username().is_empty() {
            return Err("the URL names no user: use postgresql://user@host:5432/database".into());
        }
        if url.path().trim_start_matches('/').is_empty() {
            return Err("the URL names no database: add /database after host:port".into());
        }
        if url.password().is_none() {
            if let Ok(password) = std::env::var("PGPASSWORD") {
                let _ = url.set_password(Some(&password));
            }
        }
        // Fail now on parameters tokio-postgres would reject later.
        tokio_postgres::Config::from_str(url.as_str()).map_err(|e| e.to_string())?;
        Ok(PgUrl {
            url,
            origin: origin.to_string(),
        })
    }

    /// Where the URL was configured.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The database name.
    pub fn database(&self) -> String {
        let path = self.url.path().trim_start_matches('/');
        percent_decode(path)
    }

    /// The user name.
    pub fn user(&self) -> String {
        percent_decode(self.url.username())
    }

    /// `host:port` for messages.
    pub fn host_port(&self) -> String {
        format!(
            "{}:{}",
            self.url.host_str().unwrap_or(""),
            self.url.port().unwrap_or(5432)
        )
    }

    /// The client configuration for ordinary connections.
    pub fn client_config(&self) -> tokio_postgres::Config {
        let mut config =
            tokio_postgres::Config::from_str(self.url.as_str()).expect("checked in parse");
        config.application_name("walfill");
        config
    }

    /// The full URL with its password, for a replication connection whose
    /// session runs with `options` (libpq's `-c name=value ...`), after any
    /// options the URL gives.
    pub fn replication_url(&self, options: &str) -> String {
        let mut url = self.url.clone();
        let mut given = String::new();
        let mut pairs: Vec<String> = Vec::new();
        for (k, v) in self.url.query_pairs() {
            if k == "options" {
                given = v.into_owned();
            } else if k != "replication" {
                pairs.push(format!("{}={}", percent_encode(&k), percent_encode(&v)));
            }
        }
        pairs.push("replication=database".into());
        // libpq decodes %XX in a URI but not `+`: encode spaces as %20.
        let options = format!("{given} {options}");
        pairs.push(format!("options={}", percent_encode(options.trim())));
        url.set_query(Some(&pairs.join("&")));
        url.to_string()
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(text: &str) -> String {
    url::form_urlencoded::parse(format!("x={text}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut url = self.url.clone();
        if url.password().is_some() {
            let _ = url.set_password(Some("****"));
        }
        f.write_str(url.as_str())
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_the_password() {
        let url =
            PgUrl::parse("postgresql://app:s3cret@db.example:6432/shop", "source.url").unwrap();
        assert_eq!(
            url.to_string(),
            "postgresql://app:****@db.example:6432/shop"
        );
        assert!(!format!("{url:?}").contains("s3cret"));
        let replication = url.replication_url("-c DateStyle=ISO");
        assert!(replication.contains("s3cret"));
        assert!(
            replication.contains("replication=database"),
            "{replication}"
        );
        assert!(
            replication.ends_with("options=-c%20DateStyle%3DISO"),
            "{replication}"
        );
        assert_eq!(url.database(), "shop");
        assert_eq!(url.user(), "app");
        assert_eq!(url.host_port(), "db.example:6432");
    }

    #[test]
    fn rejects_what_would_fail_later() {
        for (text, needle) in [
            ("mysql://a@b/c", "scheme"),
            ("postgresql://a@b", "no database"),
            ("postgresql://b/c", "no user"),
            ("not a url", "expected a URL"),
        ] {
            let err = PgUrl::parse(text, "source.url").unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
