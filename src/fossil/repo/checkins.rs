//! Check-ins and tags: who made each check-in, on which branch, and which tags changed.

use super::{FossilError, Repository};
use crate::fossil::artifact;
use rusqlite::OptionalExtension;

/// A check-in, as verdicts need it.
#[derive(Debug, Clone)]
pub struct CheckIn {
    pub rid: i64,
    pub hash: String,
    /// Its branch, by its branch tag.
    pub branch: Option<String>,
    /// The user written in it: its own U card, never a later `user` tag
    /// (Fossil keeps that one apart, as the event's edited user).
    pub user: String,
    /// Its sender here, by receipt.
    pub sender: Option<String>,
    pub rcvid: i64,
    pub comment: String,
}

/// One tag change of a control artifact: its op (`+`, `*`, `-`), the tag's
/// full name, its value.
#[derive(Debug, Clone)]
pub struct TagSet {
    pub op: char,
    pub name: String,
    pub value: Option<String>,
}

/// A control artifact's changes to the tags of one target, with who sent it.
#[derive(Debug, Clone)]
pub struct TagChanges {
    pub rid: i64,
    pub hash: String,
    pub rcvid: i64,
    pub sender: Option<String>,
    /// When its writer says it was written, as a Julian day.
    pub when: f64,
    /// The target's full hash.
    pub target: String,
    pub tags: Vec<TagSet>,
}

const SQL_CHECKINS: &str = "SELECT e.objid AS rid, b.uuid, (SELECT value FROM tagxref x WHERE x.rid=e.objid AND x.tagid=8 AND x.tagtype>0) AS branch,
       e.user, u.login, coalesce(b.rcvid, 0) AS rcvid, coalesce(e.ecomment, e.comment, '')
     FROM event e JOIN blob b ON b.rid=e.objid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE e.type='ci' AND EXISTS(SELECT 1 FROM mlink m WHERE m.mid=e.objid)
       AND NOT EXISTS(SELECT 1 FROM private p WHERE p.rid=e.objid)";

const SQL_CHECKIN: &str = "SELECT e.objid, b.uuid, (SELECT value FROM tagxref x WHERE x.rid=e.objid AND x.tagid=8 AND x.tagtype>0),
       e.user, u.login, coalesce(b.rcvid, 0), coalesce(e.ecomment, e.comment, '')
     FROM event e JOIN blob b ON b.rid=e.objid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
     WHERE e.objid=?1 AND e.type='ci'";

fn checkin_row(r: &rusqlite::Row) -> rusqlite::Result<CheckIn> {
    Ok(CheckIn {
        rid: r.get(0)?,
        hash: r.get(1)?,
        branch: r.get(2)?,
        user: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
        sender: r.get(4)?,
        rcvid: r.get(5)?,
        comment: r.get(6)?,
    })
}

/// The newest check-in on a branch, by the time its check-in says.
const SQL_BRANCH_TIP: &str = "SELECT e.objid FROM tagxref x JOIN tag t ON t.tagid=x.tagid
     JOIN event e ON e.objid=x.rid
     WHERE t.tagname='branch' AND x.value=?1 AND x.tagtype>0 AND e.type='ci'
     ORDER BY e.mtime DESC, e.objid DESC LIMIT 1";

impl Repository {
    /// The branch a new checkout opens: the `main-branch` setting, else trunk.
    pub fn main_branch(&self) -> Result<String, FossilError> {
        Ok(self
            .config("main-branch")?
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| "trunk".into()))
    }

    /// The newest check-in on `branch` (its row), if it has one.
    pub fn branch_tip(&self, branch: &str) -> Result<Option<i64>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_BRANCH_TIP)?;
        Ok(st.query_row([branch], |r| r.get(0)).optional()?)
    }

    /// The bytes of file `path` in check-in `checkin` (its row), if it holds one.
    pub fn file_at(&self, checkin: i64, path: &str) -> Result<Option<Vec<u8>>, FossilError> {
        match self.checkin_file(checkin, path)? {
            Some((rid, _)) => self.content(rid),
            None => Ok(None),
        }
    }

    /// The check-in `rid`, or `None` when it is no check-in.
    pub fn checkin(&self, rid: i64) -> Result<Option<CheckIn>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_CHECKIN)?;
        Ok(st.query_row([rid], checkin_row).optional()?)
    }

    /// Every public check-in, in received order.
    pub fn checkins(&self) -> Result<Vec<CheckIn>, FossilError> {
        let sql = SQL_CHECKINS.replace("AND EXISTS(SELECT 1 FROM mlink m WHERE m.mid=e.objid)", "");
        let mut st = self
            .db
            .prepare_cached(&format!("SELECT * FROM ({sql}) ORDER BY rcvid, rid"))?;
        let rows = st.query_map([], checkin_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The check-ins that change files (a check-in with no file changed is
    /// none to judge), on `branch` or every branch, in received order.
    pub fn checkins_changing_files(
        &self,
        branch: Option<&str>,
    ) -> Result<Vec<CheckIn>, FossilError> {
        let sql = format!(
            "SELECT * FROM ({SQL_CHECKINS}) WHERE (?1 IS NULL OR branch=?1) ORDER BY rcvid, rid"
        );
        let mut st = self.db.prepare_cached(&sql)?;
        let rows = st.query_map([branch], checkin_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every control artifact that sets, on any target, a tag whose name
    /// (after an optional `sym-`) is one of `names`, in received order.
    /// Fossil writes each tag change's name into its event's comment, which
    /// narrows the artifacts read.
    pub fn tag_changes(
        &self,
        names: &[&str],
        target: Option<&str>,
    ) -> Result<Vec<TagChanges>, FossilError> {
        let mut clauses: Vec<String> = names
            .iter()
            .map(|n| format!("e.comment LIKE '%\"{}\"%' ESCAPE '\\'", n.replace('%', "")))
            .collect();
        if clauses.is_empty() {
            clauses.push("1".into());
        }
        let sql = format!(
            "SELECT e.objid, b.uuid, b.rcvid, u.login, e.mtime FROM event e JOIN blob b ON b.rid=e.objid
             LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
             WHERE e.type='g' AND ({}) AND (?1 IS NULL OR e.comment LIKE '%[' || substr(?1,1,16) || '|%')
             ORDER BY b.rcvid, e.objid",
            clauses.join(" OR ")
        );
        type Row = (i64, String, Option<i64>, Option<String>, f64);
        let rows: Vec<Row> = {
            let mut st = self.db.prepare_cached(&sql)?;
            st.query_map([target], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<Result<_, _>>()?
        };
        let mut out = Vec::new();
        for (rid, hash, rcvid, sender, when) in rows {
            let Some(parsed) = self.parsed(rid)? else {
                continue;
            };
            let mut by_target: Vec<TagChanges> = Vec::new();
            for card in parsed.all(b'T') {
                let (Some(raw), Some(tgt)) = (card.args.first(), card.args.get(1)) else {
                    continue;
                };
                let name = artifact::defossilize(raw);
                let mut chars = name.chars();
                let op = chars.next().unwrap_or('+');
                let name: String = chars.collect();
                let bare = name.strip_prefix("sym-").unwrap_or(&name);
                if !names.is_empty() && !names.contains(&bare) {
                    continue;
                }
                if target.is_some_and(|t| t != tgt) {
                    continue;
                }
                let set = TagSet {
                    op,
                    name: bare.to_string(),
                    value: card.args.get(2).map(|v| artifact::defossilize(v)),
                };
                match by_target.iter_mut().find(|c| &c.target == tgt) {
                    Some(c) => c.tags.push(set),
                    None => by_target.push(TagChanges {
                        rid,
                        hash: hash.clone(),
                        rcvid: rcvid.unwrap_or(0),
                        sender: sender.clone(),
                        when,
                        target: tgt.clone(),
                        tags: vec![set],
                    }),
                }
            }
            out.extend(by_target);
        }
        Ok(out)
    }

    /// The first check-ins of `branch` (those whose primary parent is on
    /// another branch) that still carry a branch name propagated from that
    /// parent: each its full hash and the tag (`sym-NAME`). Fossil's own
    /// git import leaves them so, and `fossil update trunk` would then open
    /// another branch's check-in.
    pub fn branch_roots_inheriting(
        &self,
        branch: &str,
    ) -> Result<Vec<(String, String)>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT b.uuid, t.tagname FROM tagxref bx
             JOIN tag bt ON bt.tagid=bx.tagid AND bt.tagname='branch'
             JOIN blob b ON b.rid=bx.rid
             JOIN plink p ON p.cid=bx.rid AND p.isprim
             JOIN tagxref px ON px.rid=p.pid AND px.tagid=bt.tagid
             JOIN tagxref sx ON sx.rid=bx.rid AND sx.tagtype=2
             JOIN tag t ON t.tagid=sx.tagid
             WHERE bx.value=?1 AND bx.tagtype>0 AND px.value<>?1
               AND t.tagname GLOB 'sym-*' AND t.tagname<>('sym-' || ?1)",
        )?;
        let rows = st.query_map([branch], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The artifacts tagged `name` (a raw tag, such as `ocx-message`), in received order.
    pub fn tagged(&self, name: &str) -> Result<Vec<(i64, String)>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT x.rid, b.uuid FROM tagxref x JOIN blob b ON b.rid=x.rid
             WHERE x.tagid=(SELECT tagid FROM tag WHERE tagname=?1) AND x.tagtype>0 ORDER BY b.rcvid, x.rid",
        )?;
        let rows = st.query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
