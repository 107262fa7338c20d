//! Whose WAL it is: the cluster's system identifier and its timeline
//! history, to check archived WAL against before trusting it.
//!
//! An archive may hold WAL of another cluster (a copy, staging instead of
//! production) or of a timeline the source abandoned (the old primary went
//! on writing after a failover). Neither describes the source's history, and
//! replaying it would build a version from changes that never happened
//! there: decoding refuses it, naming which it is.

use crate::lsn::Lsn;

/// The source cluster's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `IDENTIFY_SYSTEM`'s system identifier (`xlp_sysid` in WAL pages).
    pub system_id: u64,
    /// The source's current timeline.
    pub timeline: u32,
    /// The timelines before it, oldest first: each one's id and the LSN at
    /// which it ended (the next one began).
    pub history: Vec<(u32, Lsn)>,
}

impl Identity {
    /// The identity of a cluster on `timeline`, whose timeline history file
    /// is `history` (empty for timeline 1): lines `parent<TAB>X/Y<TAB>reason`.
    pub fn new(system_id: u64, timeline: u32, history: &str) -> Result<Identity, String> {
        let mut spans = Vec::new();
        for line in history.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(tli), Some(lsn)) = (fields.next(), fields.next()) else {
                return Err(format!("unreadable timeline history line {line:?}"));
            };
            let tli: u32 = tli
                .parse()
                .map_err(|_| format!("unreadable timeline in history line {line:?}"))?;
            let lsn: Lsn = lsn
                .parse()
                .map_err(|_| format!("unreadable LSN in history line {line:?}"))?;
            spans.push((tli, lsn));
        }
        Ok(Identity {
            system_id,
            timeline,
            history: spans,
        })
    }

    /// The timeline the source's history puts WAL position `lsn` on.
    pub fn timeline_at(&self, lsn: Lsn) -> u32 {
        self.history
            .iter()
            .find(|(_, end)| lsn < *end)
            .map(|(tli, _)| *tli)
            .unwrap_or(self.timeline)
    }

    /// Why WAL at `lsn`, from a page of cluster `system_id` on `timeline`,
    /// is not the source's history; `None` when it is.
    pub fn refuse(&self, lsn: Lsn, system_id: u64, timeline: u32) -> Option<String> {
        if system_id != self.system_id {
            return Some(format!(
                "the archived WAL at {lsn} belongs to another cluster: its system identifier \
                 is {system_id}, the source's is {}; point [archive] url at the source's own \
                 archive",
                self.system_id
            ));
        }
        let expected = self.timeline_at(lsn);
        if timeline != expected {
            return Some(format!(
                "the archived WAL at {lsn} is on timeline {timeline}, but the source's history \
                 puts that position on timeline {expected}: it is WAL of a timeline the source \
                 abandoned (after a failover) and never happened there"
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_belong_to_the_timeline_of_their_history() {
        let id =
            Identity::new(7, 3, "1\t0/3000000\tno recovery target\n2\t0/5000000\tx\n").unwrap();
        assert_eq!(id.timeline_at(Lsn(0x2000000)), 1);
        assert_eq!(id.timeline_at(Lsn(0x3000000)), 2);
        assert_eq!(id.timeline_at(Lsn(0x6000000)), 3);
        assert!(id.refuse(Lsn(0x2000000), 7, 1).is_none());
        let abandoned = id.refuse(Lsn(0x4000000), 7, 1).unwrap();
        assert!(abandoned.contains("abandoned"), "{abandoned}");
        let foreign = id.refuse(Lsn(0x2000000), 8, 1).unwrap();
        assert!(foreign.contains("system identifier"), "{foreign}");
        assert!(Identity::new(7, 2, "garbage").is_err());
    }
}
