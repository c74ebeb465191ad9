//! Logins made and changed through `fossil user`, each secret given on
//! standard input (`--args -`), never on the command line.

use super::Fossil;
use super::plain;
use super::sql::literal;
use crate::fossil::FossilError;
use std::path::Path;

/// The contact a login OCX makes is given (`user new` takes one, and
/// `--args` cannot give an empty one).
const MADE_CONTACT: &str = "made by OCX";

impl Fossil {
    /// Makes login `login` with `password` and no capabilities. The
    /// password is given on standard input (`--args -`), never on the
    /// command line, where every account could read it.
    pub fn user_new(
        &self,
        repository: &Path,
        login: &str,
        password: &str,
    ) -> Result<(), FossilError> {
        self.user_with_secret(
            "user new",
            &["new", login, MADE_CONTACT, password],
            repository,
        )?;
        self.user_capabilities(repository, login, "")
    }

    /// Sets `login`'s password, given on standard input (`--args -`).
    pub fn user_password(
        &self,
        repository: &Path,
        login: &str,
        password: &str,
    ) -> Result<(), FossilError> {
        self.user_with_secret("user password", &["password", login, password], repository)
    }

    /// Runs `fossil user WORDS -R REPOSITORY` with every word on standard
    /// input, one a line, as `--args -` reads them: no word may be empty
    /// (it skips empty lines) or begin with `-` (it would be an option).
    fn user_with_secret(
        &self,
        operation: &'static str,
        words: &[&str],
        repository: &Path,
    ) -> Result<(), FossilError> {
        let repository = repository.to_str().ok_or(FossilError::Command {
            operation,
            message: "the repository's path is not UTF-8".into(),
        })?;
        let mut args = String::new();
        for w in words.iter().copied().chain([repository]) {
            if w.is_empty() || w.starts_with('-') || w.contains(['\n', '\r']) {
                return Err(FossilError::Command {
                    operation,
                    message: "a login, contact or password is empty, begins with '-' or holds a line break"
                        .into(),
                });
            }
        }
        for w in words.iter().copied().chain(["-R", repository]) {
            args.push_str(w);
            args.push('\n');
        }
        self.run_with_input(
            operation,
            &["user".as_ref(), "--args".as_ref(), "-".as_ref()],
            args.as_bytes(),
        )
        .map(|_| ())
    }

    /// Gives a run `login` in `repository` with `password` and exactly
    /// the capabilities `letters`, in one `fossil sql` (statements on its
    /// standard input, never the command line): a login not made yet is
    /// marked as a run's (`mark`, saying who marked it) before it is made,
    /// so a node killed between the two leaves a mark for no login, never
    /// a login it cannot tell from one made by hand; an existing one has
    /// its password and letters set. The password is stored as Fossil's
    /// own `user new` and `user password` store it (the SHA-1 of the
    /// project code, the login and the password, joined by `/`), and the
    /// row is read back: a login that is not as asked is refused.
    pub fn give_run_login(
        &self,
        repository: &Path,
        login: &str,
        password: &str,
        letters: &str,
        mark: Option<&str>,
    ) -> Result<(), FossilError> {
        const OPERATION: &str = "run login";
        if !letters.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(FossilError::Command {
                operation: OPERATION,
                message: format!("{letters:?} are not capability letters"),
            });
        }
        let (l, caps) = (literal(OPERATION, login)?, literal(OPERATION, letters)?);
        let pw = format!(
            "sha1((SELECT value FROM config WHERE name='project-code')||'/'||{l}||'/'||{})",
            literal(OPERATION, password)?
        );
        let change = match mark {
            Some(by) => format!(
                "REPLACE INTO config(name,value,mtime) VALUES({},{},now());\n\
                 INSERT INTO user(login,pw,cap,info,mtime) VALUES({l},{pw},{caps},{},now());\n",
                literal(OPERATION, &crate::fossil::repo::run_user_mark(login))?,
                literal(OPERATION, by)?,
                literal(OPERATION, MADE_CONTACT)?
            ),
            None => format!("UPDATE user SET pw={pw}, cap={caps}, mtime=now() WHERE login={l};\n"),
        };
        let sql = format!(
            "{change}SELECT count(*) FROM user WHERE login={l} AND pw={pw} AND cap={caps};\n"
        );
        match self.sql_on_stdin(OPERATION, repository, &sql)?.trim() {
            "1" => Ok(()),
            _ => Err(FossilError::Command {
                operation: OPERATION,
                message: format!(
                    "the login {login} was not {} as asked",
                    if mark.is_some() { "made" } else { "set" }
                ),
            }),
        }
    }

    /// Names `login` the default user of the clone `repository`, as
    /// `fossil user default LOGIN -R REPOSITORY` does (its `config` row
    /// `default-user`), written in this process: for a clone just made
    /// that no other process holds (a run's, before its program starts),
    /// where starting `fossil` for one row would cost more than the row.
    pub fn clone_default_user(repository: &Path, login: &str) -> Result<(), FossilError> {
        plain("user default", "the login", login)?;
        let db = rusqlite::Connection::open_with_flags(
            repository,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        db.execute(
            "REPLACE INTO config(name,value,mtime) VALUES('default-user',?1,strftime('%s','now'))",
            [login],
        )?;
        Ok(())
    }

    /// Names `login` the default user of `repository`: who acts there when
    /// no one is named.
    pub fn user_default(&self, repository: &Path, login: &str) -> Result<(), FossilError> {
        self.run(
            "user default",
            &[
                "user".as_ref(),
                "default".as_ref(),
                plain("user default", "the login", login)?,
                "-R".as_ref(),
                repository.as_os_str(),
            ],
        )
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fossil: &Fossil, repo: &Path, login: &str) -> String {
        let sql = format!(
            "SELECT pw, cap FROM user WHERE login={};\n",
            literal("t", login).unwrap()
        );
        fossil
            .sql_on_stdin("t", repo, &sql)
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn a_run_login_is_stored_as_fossils_own_user_commands_store_it() {
        let fossil = Fossil::locate().expect("fossil");
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.fossil");
        fossil.new_repository(&repo, "admin").unwrap();
        fossil
            .give_run_login(&repo, "run-1", "first pw", "gio", Some("made by node-1"))
            .unwrap();
        let given = row(&fossil, &repo, "run-1");
        assert!(given.ends_with("|gio"), "{given}");
        let mark = fossil.sql_on_stdin(
            "t",
            &repo,
            &format!(
                "SELECT value FROM config WHERE name={};\n",
                literal("t", &crate::fossil::repo::run_user_mark("run-1")).unwrap()
            ),
        );
        assert_eq!(mark.unwrap().trim(), "made by node-1");
        fossil.user_password(&repo, "run-1", "first pw").unwrap();
        assert_eq!(
            row(&fossil, &repo, "run-1"),
            given,
            "Fossil hashes it alike"
        );

        fossil
            .give_run_login(&repo, "run-1", "second pw", "gior", None)
            .unwrap();
        let reset = row(&fossil, &repo, "run-1");
        assert!(reset.ends_with("|gior") && reset != given, "{reset}");
        fossil.user_password(&repo, "run-1", "second pw").unwrap();
        assert_eq!(row(&fossil, &repo, "run-1"), reset);

        let again = fossil.give_run_login(&repo, "run-1", "third", "gio", Some("made by node-1"));
        assert!(again.is_err(), "a login made already is not made again");
        assert_eq!(row(&fossil, &repo, "run-1"), reset);
        let none = fossil.give_run_login(&repo, "nobody-here", "pw", "gio", None);
        assert!(none.is_err(), "no login is set that is not there");
    }

    #[test]
    fn a_clones_default_user_is_the_one_fossil_names() {
        let fossil = Fossil::locate().expect("fossil");
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("r.fossil");
        let fossil_says = |args: &[&str]| {
            let out = std::process::Command::new(fossil.path())
                .args(args)
                .arg("-R")
                .arg(&repo)
                .env_remove("USER")
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        fossil.new_repository(&repo, "admin").unwrap();
        fossil_says(&["user", "new", "run-2", "c", "pw"]);
        Fossil::clone_default_user(&repo, "run-2").unwrap();
        assert_eq!(fossil_says(&["user", "default"]), "run-2");
        assert!(Fossil::clone_default_user(&repo, "-R").is_err());
    }
}
