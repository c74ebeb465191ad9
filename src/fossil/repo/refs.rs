//! What a question's references name: a forum post, a ticket, a tech-note,
//! a check-in, a file's lines, a wiki page, each read as a person is shown
//! it (its title, who sent it by receipt, when its writer says, its words).

use super::{FossilError, Lookup, Repository};
use rusqlite::OptionalExtension;

/// One thing a reference names, as read here.
#[derive(Debug, Clone, Default)]
pub struct Thing {
    /// Its title as Fossil shows it.
    pub title: String,
    /// Its sender by receipt (a ticket's first change's).
    pub by: Option<String>,
    /// When its writer says it was written, as a Julian day.
    pub at: Option<f64>,
    /// Its words (a post's text, a comment, a page), whole.
    pub text: String,
    /// Whether Fossil holds it private.
    pub private: bool,
}

const SQL_TECHNOTE: &str =
    "SELECT e.objid, substr(t.tagname, 7) FROM tag t JOIN event e ON e.tagid=t.tagid
     WHERE t.tagname>=('event-' || ?1) AND t.tagname<('event-' || ?2) AND e.type='e'
     GROUP BY t.tagid LIMIT 2";

const SQL_EVENT: &str = "SELECT coalesce(e.ecomment, e.comment, ''), e.mtime, u.login,
       EXISTS(SELECT 1 FROM private WHERE rid=e.objid)
     FROM event e JOIN blob b ON b.rid=e.objid
     LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid WHERE e.objid=?1";

impl Repository {
    /// The tech-note whose id a prefix names: its newest version's row and its full id.
    pub fn resolve_technote(&self, prefix: &str) -> Result<Lookup, FossilError> {
        let mut st = self.db.prepare_cached(SQL_TECHNOTE)?;
        let rows: Vec<(i64, String)> = st
            .query_map([prefix.to_string(), format!("{prefix}g")], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        Ok(match rows.len() {
            0 => Lookup::None,
            1 => {
                let (_, id) = rows.into_iter().next().expect("one row");
                let rid = self.row(
                    "SELECT e.objid FROM tag t JOIN event e ON e.tagid=t.tagid
                     WHERE t.tagname=('event-' || ?1) ORDER BY e.mtime DESC LIMIT 1",
                    [&id],
                    |r| r.get(0),
                )?;
                Lookup::One(rid, id)
            }
            _ => Lookup::Several,
        })
    }

    /// A check-in or tech-note (`rid`, a row of Fossil's timeline) read as a thing.
    pub fn event_thing(&self, rid: i64) -> Result<Option<Thing>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_EVENT)?;
        let row = st
            .query_row([rid], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<f64>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, bool>(3)?,
                ))
            })
            .optional()?;
        let Some((comment, at, by, private)) = row else {
            return Ok(None);
        };
        let text = self
            .parsed(rid)?
            .and_then(|p| p.text)
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_else(|| comment.clone());
        Ok(Some(Thing {
            title: comment.lines().next().unwrap_or("").to_string(),
            by,
            at,
            text,
            private,
        }))
    }

    /// Whether `rid` is a check-in.
    pub fn is_checkin(&self, rid: i64) -> Result<bool, FossilError> {
        Ok(self
            .row(
                "SELECT 1 FROM event WHERE objid=?1 AND type='ci'",
                [rid],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Forum post `rid` read as a thing: its thread's title, its text.
    pub fn post_thing(&self, rid: i64) -> Result<Option<Thing>, FossilError> {
        let Some(said) = self.said(rid)? else {
            return Ok(None);
        };
        let Some(root) = self.thread_root(rid)? else {
            return Ok(None);
        };
        let title = self
            .parsed(root)?
            .and_then(|p| p.arg(b'H'))
            .unwrap_or_default();
        let text = self
            .parsed(rid)?
            .and_then(|p| p.text)
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_default();
        Ok(Some(Thing {
            title,
            by: said.from,
            at: Some(said.when),
            text,
            private: said.private,
        }))
    }

    /// Ticket `tkt_id` read as a thing: its title and comment, its first
    /// change's sender.
    pub fn ticket_thing(&self, tkt_id: i64) -> Result<Option<Thing>, FossilError> {
        let row = self
            .row(
                "SELECT coalesce(title, ''), coalesce(comment, ''), tkt_ctime FROM ticket WHERE tkt_id=?1",
                [tkt_id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<f64>>(2)?,
                    ))
                },
            )
            .optional()?;
        let Some((title, comment, at)) = row else {
            return Ok(None);
        };
        let first: Option<(Option<String>, bool)> = self
            .row(
                "SELECT u.login, EXISTS(SELECT 1 FROM private WHERE rid=c.tkt_rid)
                 FROM ticketchng c JOIN blob b ON b.rid=c.tkt_rid
                 LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
                 WHERE c.tkt_id=?1 ORDER BY b.rcvid, c.tkt_rid LIMIT 1",
                [tkt_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let (by, private) = first.unwrap_or((None, false));
        Ok(Some(Thing {
            title,
            by,
            at,
            text: comment,
            private,
        }))
    }

    /// The file `path` of check-in `checkin` (its row): the file's row and hash.
    pub fn checkin_file(
        &self,
        checkin: i64,
        path: &str,
    ) -> Result<Option<(i64, String)>, FossilError> {
        let Some(p) = self.parsed(checkin)? else {
            return Ok(None);
        };
        let mut cards: Vec<&crate::fossil::artifact::Card> = p.all(b'F').collect();
        let baseline;
        if let Some(b) = p.arg(b'B')
            && let Lookup::One(rid, _) = self.resolve(&b)?
            && let Some(bp) = self.parsed(rid)?
        {
            baseline = bp;
            cards.extend(baseline.all(b'F'));
        }
        for c in cards {
            let name = c
                .args
                .first()
                .map(|a| crate::fossil::artifact::defossilize(a));
            if name.as_deref() == Some(path)
                && let Some(hash) = c.args.get(1)
            {
                return Ok(match self.resolve(hash)? {
                    Lookup::One(rid, hash) => Some((rid, hash)),
                    _ => None,
                });
            }
        }
        Ok(None)
    }

    /// Every file of check-in `checkin` (its row): its path as the
    /// check-in names it, its content's row, and whether it is
    /// executable (`x`) or a symbolic link (`l`, its content the target),
    /// a delta manifest read over its baseline.
    pub fn checkin_files(&self, checkin: i64) -> Result<Vec<CheckinFile>, FossilError> {
        let Some(p) = self.parsed(checkin)? else {
            return Ok(Vec::new());
        };
        let mut files = std::collections::BTreeMap::new();
        let mut apply = |cards: &mut dyn Iterator<Item = &crate::fossil::artifact::Card>| -> Result<(), FossilError> {
            for c in cards {
                let Some(name) = c.args.first().map(|a| crate::fossil::artifact::defossilize(a)) else {
                    continue;
                };
                match c.args.get(1) {
                    None => {
                        files.remove(&name);
                    }
                    Some(hash) => {
                        if let Lookup::One(rid, _) = self.resolve(hash)? {
                            let perm = c.args.get(2).map(String::as_str).unwrap_or("");
                            files.insert(
                                name.clone(),
                                CheckinFile {
                                    path: name,
                                    rid,
                                    executable: perm.contains('x'),
                                    link: perm.contains('l'),
                                },
                            );
                        }
                    }
                }
            }
            Ok(())
        };
        if let Some(b) = p.arg(b'B')
            && let Lookup::One(rid, _) = self.resolve(&b)?
            && let Some(bp) = self.parsed(rid)?
        {
            apply(&mut bp.all(b'F'))?;
        }
        apply(&mut p.all(b'F'))?;
        Ok(files.into_values().collect())
    }

    /// The newest version of wiki page `name` read as a thing.
    pub fn wiki_thing(&self, name: &str) -> Result<Option<(String, Thing)>, FossilError> {
        let Some(page) = self.wiki_page(name)? else {
            return Ok(None);
        };
        let at: Option<f64> = self
            .row(
                "SELECT e.mtime FROM event e JOIN blob b ON b.rid=e.objid WHERE b.uuid=?1",
                [&page.hash],
                |r| r.get(0),
            )
            .optional()?;
        let private = self.receipt(&page.hash)?.is_some_and(|r| r.private);
        Ok(Some((
            page.hash,
            Thing {
                title: name.to_string(),
                by: page.sent_by,
                at,
                text: page.text,
                private,
            },
        )))
    }

    /// The full hash of the post forum post `rid` replies to, if it replies to one.
    pub fn replies_to(&self, rid: i64) -> Result<Option<String>, FossilError> {
        if self.thread_root(rid)?.is_none() {
            return Ok(None);
        }
        Ok(self
            .row(
                "SELECT b.uuid FROM forumpost p JOIN blob b ON b.rid=p.firt WHERE p.fpid=?1",
                [rid],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The public URLs this repository has been served at, as Fossil
    /// remembers each (its `baseurl:` settings).
    pub fn base_urls(&self) -> Result<Vec<String>, FossilError> {
        let mut st = self
            .db
            .prepare_cached("SELECT substr(name, 9) FROM config WHERE name GLOB 'baseurl:*'")?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The artifacts tagged `name` with value `value`, in received order.
    pub fn tagged_with(&self, name: &str, value: &str) -> Result<Vec<(i64, String)>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT x.rid, b.uuid FROM tagxref x JOIN blob b ON b.rid=x.rid
             WHERE x.tagid=(SELECT tagid FROM tag WHERE tagname=?1) AND x.tagtype>0 AND x.value=?2
             ORDER BY b.rcvid, x.rid",
        )?;
        let rows = st.query_map([name, value], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// A file of a check-in ([`Repository::checkin_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckinFile {
    /// Its path, as the check-in names it (never trusted as a path on disk).
    pub path: String,
    /// Its content's row.
    pub rid: i64,
    pub executable: bool,
    /// Whether it is a symbolic link, its content the link's target.
    pub link: bool,
}
