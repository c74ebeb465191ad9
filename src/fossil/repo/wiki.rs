//! Wiki pages: a page's newest version, every page's name, and each version's sender.

use super::{FossilError, Repository};
use rusqlite::OptionalExtension;

/// The newest version of a wiki page.
#[derive(Debug, Clone)]
pub struct WikiVersion {
    /// Its full hash.
    pub hash: String,
    /// Its mimetype (`text/x-fossil-wiki` when it names none).
    pub mimetype: String,
    /// The page's text.
    pub text: String,
    /// Who stored it, as the receipt names them.
    pub sent_by: Option<String>,
}

const SQL_WIKI_NEWEST: &str = "SELECT x.rid, b.uuid FROM tag t JOIN tagxref x ON x.tagid=t.tagid \
     JOIN blob b ON b.rid=x.rid WHERE t.tagname=?1 ORDER BY x.mtime DESC, x.rid DESC LIMIT 1";

const SQL_WIKI_NAMES: &str =
    "SELECT substr(tagname, 6) FROM tag WHERE tagname GLOB 'wiki-*' ORDER BY 1";

impl Repository {
    /// The newest version of wiki page `name`, or `None` when there is none.
    pub fn wiki_page(&self, name: &str) -> Result<Option<WikiVersion>, FossilError> {
        let row: Option<(i64, String)> = self
            .row(SQL_WIKI_NEWEST, [format!("wiki-{name}")], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let Some((rid, hash)) = row else {
            return Ok(None);
        };
        let parsed = self
            .parsed(rid)?
            .ok_or_else(|| FossilError::Corrupt(hash.clone()))?;
        let text = String::from_utf8_lossy(parsed.text.as_deref().unwrap_or_default()).into_owned();
        let mimetype = parsed
            .arg(b'N')
            .unwrap_or_else(|| "text/x-fossil-wiki".to_string());
        let sent_by = self.receipt(&hash)?.and_then(|r| r.login);
        Ok(Some(WikiVersion {
            hash,
            mimetype,
            text,
            sent_by,
        }))
    }

    /// The names of every wiki page, sorted.
    pub fn wiki_names(&self) -> Result<Vec<String>, FossilError> {
        let mut st = self.db.prepare_cached(SQL_WIKI_NAMES)?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every version of wiki page `name` with its sender (by receipt),
    /// newest received first: by `rcvid`, then row, never the writer's
    /// own date, which anyone may set.
    pub fn wiki_versions_received(
        &self,
        name: &str,
    ) -> Result<Vec<(i64, Option<String>)>, FossilError> {
        let mut st = self.db.prepare_cached(
            "SELECT x.rid, u.login FROM tag t JOIN tagxref x ON x.tagid=t.tagid JOIN blob b ON b.rid=x.rid
             LEFT JOIN rcvfrom r ON r.rcvid=b.rcvid LEFT JOIN user u ON u.uid=r.uid
             WHERE t.tagname='wiki-' || ?1 AND NOT EXISTS(SELECT 1 FROM private p WHERE p.rid=x.rid)
             ORDER BY coalesce(b.rcvid, 0) DESC, x.rid DESC",
        )?;
        let rows = st.query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
