//! Setup's problems, listed in the order their fixes can be carried out.

use crate::error::Error;

/// When a problem's fix can be carried out. Setup lists problems in this
/// order, so that each fix is valid once the ones above it are done: the
/// configuration first, then the server's settings (a restart), the roles'
/// attributes, grants, the publication (as the tables' owner), and last a
/// run of setup as a superuser.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Step {
    /// The configuration file or the tables it names.
    Config,
    /// Server settings that need a restart.
    Server,
    /// Role attributes (`ALTER ROLE`).
    Role,
    /// Privileges (`GRANT`, ownership).
    Grant,
    /// The publication, as the tables' owner.
    Publication,
    /// A run of setup with a superuser's source URL.
    Superuser,
}

/// A fix: who runs `sql`, and in which database (`None`: any).
pub(super) fn fix(who: &str, database: Option<&str>, sql: &str) -> String {
    match database {
        Some(db) => format!("fix (as {who}, in database {db}): {sql}"),
        None => format!("fix (as {who}): {sql}"),
    }
}

/// Problems found so far, each with its fix.
#[derive(Debug, Default)]
pub(super) struct Problems(Vec<(Step, String)>);

impl Problems {
    /// Adds a problem (once, however many targets meet it).
    pub(super) fn add(&mut self, step: Step, text: impl Into<String>) {
        let text = text.into();
        if !self.0.iter().any(|(_, t)| *t == text) {
            self.0.push((step, text));
        }
    }

    /// Adds several problems of one step.
    pub(super) fn extend(&mut self, step: Step, texts: impl IntoIterator<Item = String>) {
        for text in texts {
            self.add(step, text);
        }
    }

    /// The problems in the order their fixes can be carried out, as the
    /// error that stops setup; `None` when there are none.
    pub(super) fn into_error(mut self) -> Option<Error> {
        if self.0.is_empty() {
            return None;
        }
        self.0.sort_by_key(|(step, _)| *step);
        Some(Error::Problems(
            self.0.into_iter().map(|(_, text)| text).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_by_step_then_as_found_and_once() {
        let mut problems = Problems::default();
        problems.add(Step::Superuser, "run setup as a superuser");
        problems.add(Step::Publication, "create the publication");
        problems.add(Step::Grant, "grant select on a");
        problems.add(Step::Server, "wal_level");
        problems.add(Step::Grant, "grant select on b");
        problems.add(Step::Grant, "grant select on a");
        let Some(Error::Problems(list)) = problems.into_error() else {
            panic!("expected problems");
        };
        assert_eq!(
            list,
            [
                "wal_level",
                "grant select on a",
                "grant select on b",
                "create the publication",
                "run setup as a superuser"
            ]
        );
        assert!(Problems::default().into_error().is_none());
    }
}
