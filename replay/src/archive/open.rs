//! Archive URLs to object stores.
//!
//! Supported: `file:///absolute/path` (a local directory, written with
//! fsync), `s3://bucket/prefix` (configured from the standard `AWS_*`
//! environment variables: credentials, `AWS_REGION`, `AWS_ENDPOINT` or
//! `AWS_ENDPOINT_URL` for an S3-compatible server, `AWS_ALLOW_HTTP=true`
//! for a plain-HTTP one) and `memory://` (an empty in-memory store, new at
//! every open: for tests). Other schemes are refused with the list above.

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;
use url::Url;

use super::error::ArchiveError;

/// What the supported URLs look like, for error messages.
const SUPPORTED: &str = "supported archive URLs are file:///absolute/path, \
                         s3://bucket/prefix and memory://";

/// An object store and the prefix of the archive inside it.
pub(super) struct Opened {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) prefix: Path,
}

/// Opens the object store a URL names. No request is made: credentials
/// and reachability show up on first use.
pub(super) fn open_url(text: &str) -> Result<Opened, ArchiveError> {
    let invalid = |reason: String| ArchiveError::InvalidUrl {
        url: text.to_string(),
        reason,
    };
    let url = Url::parse(text).map_err(|e| match e {
        url::ParseError::RelativeUrlWithoutBase => invalid(format!(
            "not a URL (a local directory is file:///absolute/path); {SUPPORTED}"
        )),
        e => invalid(format!("{e}; {SUPPORTED}")),
    })?;
    let prefix = |url: &Url| {
        Path::from_url_path(url.path())
            .map_err(|e| invalid(format!("unusable path {:?}: {e}", url.path())))
    };
    match url.scheme() {
        "file" => {
            if url.host_str().is_some_and(|h| !h.is_empty()) {
                return Err(invalid(
                    "a file URL needs an absolute path and no host: file:///absolute/path"
                        .to_string(),
                ));
            }
            let store = LocalFileSystem::new().with_fsync(true);
            Ok(Opened {
                store: Arc::new(store),
                prefix: prefix(&url)?,
            })
        }
        "memory" => Ok(Opened {
            store: Arc::new(InMemory::new()),
            prefix: prefix(&url)?,
        }),
        "s3" | "s3a" => {
            if url.host_str().is_none_or(str::is_empty) {
                return Err(invalid(
                    "an S3 URL names its bucket: s3://bucket/prefix".to_string(),
                ));
            }
            let store = AmazonS3Builder::from_env()
                .with_url(text)
                .build()
                .map_err(|source| ArchiveError::Open {
                    url: text.to_string(),
                    source: Box::new(source),
                })?;
            Ok(Opened {
                store: Arc::new(store),
                prefix: prefix(&url)?,
            })
        }
        other => Err(invalid(format!(
            "scheme {other:?} is not supported by this build; {SUPPORTED}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(text: &str) -> String {
        match open_url(text) {
            Err(ArchiveError::InvalidUrl { url, reason }) => {
                assert_eq!(url, text);
                reason
            }
            Err(other) => panic!("{text}: unexpected error {other}"),
            Ok(_) => panic!("{text}: accepted"),
        }
    }

    #[test]
    fn supported_urls_give_their_prefix() {
        let opened = open_url("file:///var/lib/walfill/archive").unwrap();
        assert_eq!(opened.prefix.as_ref(), "var/lib/walfill/archive");
        let opened = open_url("file:///srv/with%20space/").unwrap();
        assert_eq!(opened.prefix.as_ref(), "srv/with space");
        let opened = open_url("memory://").unwrap();
        assert_eq!(opened.prefix.as_ref(), "");
        let opened = open_url("memory:///some/prefix").unwrap();
        assert_eq!(opened.prefix.as_ref(), "some/prefix");
        // Builds without contacting anything.
        let opened = open_url("s3://bucket/cluster-a/wal-archive").unwrap();
        assert_eq!(opened.prefix.as_ref(), "cluster-a/wal-archive");
        assert!(opened.store.to_string().contains("bucket"));
    }

    #[test]
    fn url_errors_say_what_to_write() {
        let r = reason("/var/lib/archive");
        assert!(r.contains("file:///absolute/path"), "{r}");
        let r = reason("gs://bucket/prefix");
        assert!(
            r.contains("\"gs\"") && r.contains("s3://bucket/prefix"),
            "{r}"
        );
        let r = reason("az://container/prefix");
        assert!(r.contains("\"az\"") && r.contains("memory://"), "{r}");
        let r = reason("https://example.com/archive");
        assert!(r.contains("\"https\""), "{r}");
        let r = reason("file://host/archive");
        assert!(r.contains("no host"), "{r}");
        let r = reason("s3:///prefix");
        assert!(r.contains("bucket"), "{r}");
        let r = reason("file:///a/../b/%2F");
        assert!(r.contains("unusable path"), "{r}");
        let message = ArchiveError::InvalidUrl {
            url: "gs://x".into(),
            reason: "r".into(),
        }
        .to_string();
        assert!(message.contains("gs://x"), "{message}");
    }
}
