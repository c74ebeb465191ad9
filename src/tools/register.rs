//! `register`: asks a server for a login, from the asker's own command line
//! alone. The first call makes a 32-byte random code and keeps it with the
//! login and the capabilities asked in the credentials file, readable by
//! its owner alone; every call while the login is not approved asks the
//! server's `collect` and refuses with the one link an administrator
//! opens; once approved, the password takes the code's place in the file.
//! No secret is ever on a command line or in the environment.

use super::logins;
use crate::answer::Op;
use crate::node::page::{PAGE, Page, PageError};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The capabilities asked for unless told: check out, read, append to
/// tickets, post to the forum unmoderated, and write (check in).
pub const DEFAULT_CAPABILITIES: &str = "goC4w";

/// Input of `register`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The served repository's address, as it is cloned (https://host/repo).
    pub server: String,
    /// The file keeping the login, its code and then its password, readable by you alone.
    #[schemars(extend("x-positional" = true))]
    pub credentials: String,
    /// The login to ask for (default: this machine's host name): lowercase letters, digits and dashes.
    #[serde(default)]
    pub login: Option<String>,
    /// The capability letters to ask for (default goC4w).
    #[serde(default)]
    pub capabilities: Option<String>,
}

/// What `register` found.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The login.
    pub user: String,
    /// The letters asked for.
    pub capabilities: String,
    /// `collected` (the password was just collected and kept) or `approved` (the file held it already).
    pub state: String,
    /// The credentials file.
    pub credentials: String,
}

/// What the credentials file keeps.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Credentials {
    user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capabilities: Option<String>,
}

/// The `register` tool.
pub struct Register;

impl Tool for Register {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "register";
    const SUMMARY: &'static str =
        "Ask a server for a login, and collect its password once an administrator approves it.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = true;
    const REACH: Reach = Reach::CommandLine;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let server = server_of(&input.server)?;
        let path = call.cx.cwd.join(&input.credentials);
        let shown = input.credentials.clone();
        let kept = read_credentials(&path)?;
        call.read(format!("the credentials file {shown}"));
        let creds = match kept {
            Some(c) => as_kept(c, &input, &shown)?,
            None => new_code(input, &path, &shown, call)?,
        };
        let capabilities = creds
            .capabilities
            .clone()
            .unwrap_or_else(|| DEFAULT_CAPABILITIES.into());
        if creds.password.is_some() {
            return Ok(Output {
                user: creds.user,
                capabilities,
                state: "approved".into(),
                credentials: shown,
            });
        }
        let Some(code) = creds.code.clone() else {
            return Err(Stop::field(
                "credentials",
                format!("{shown} holds neither a code nor a password"),
            )
            .next("remove the file and run register again"));
        };
        let key = hex::encode(Sha256::digest(code.as_bytes()));
        let link = format!(
            "{server}/ext/{PAGE}/approve?login={}&key={key}&capabilities={capabilities}",
            creds.user
        );
        let pending = || {
            Stop::new(format!(
                "{} is not approved yet on {server}: an administrator opens {link}",
                creds.user
            ))
            .next("send the link to an administrator, then run register again")
        };
        if call.dry_run {
            call.log(Op::Fossil {
                operation: format!("ask {server} for {}'s password", creds.user),
                done: false,
            });
            return Err(pending());
        }
        let password = collect(&server, &creds.user, &code)?;
        call.log(Op::Fossil {
            operation: format!("ask {server} for {}'s password", creds.user),
            done: true,
        });
        let Some(password) = password else {
            return Err(pending());
        };
        let done = Credentials {
            user: creds.user.clone(),
            code: None,
            password: Some(password),
            capabilities: Some(capabilities.clone()),
        };
        write_credentials(&path, &done, false)?;
        call.log(Op::Fossil {
            operation: format!("keep the password in {shown} in place of the code"),
            done: true,
        });
        Ok(Output {
            user: creds.user,
            capabilities,
            state: "collected".into(),
            credentials: shown,
        })
    }
}

/// The credentials `shown` keeps, refused when the login or capabilities
/// asked for are not those it was made for.
fn as_kept(c: Credentials, input: &Input, shown: &str) -> Result<Credentials, Stop> {
    let asked = c
        .capabilities
        .clone()
        .unwrap_or_else(|| DEFAULT_CAPABILITIES.into());
    if let Some(l) = input.login.as_deref().filter(|l| *l != c.user) {
        return Err(Stop::field(
            "login",
            format!("{shown} keeps the login {}, not {l}", c.user),
        )
        .next("leave --login out, or give another credentials file"));
    }
    if let Some(l) = input.capabilities.as_deref().filter(|l| *l != asked) {
        return Err(Stop::field(
            "capabilities",
            format!("{shown} asked for {asked}, not {l}"),
        )
        .next("leave --capabilities out, or give another credentials file"));
    }
    Ok(c)
}

/// New credentials asking for the login and capabilities given (the
/// host's login and [`DEFAULT_CAPABILITIES`] by default), with a new code,
/// kept at `path` readable by its owner alone.
fn new_code(input: Input, path: &Path, shown: &str, call: &mut Call) -> Result<Credentials, Stop> {
    let user = match input.login {
        Some(l) => l,
        None => host_login()?,
    };
    logins::check_login("login", &user)?;
    let capabilities = input
        .capabilities
        .unwrap_or_else(|| DEFAULT_CAPABILITIES.into());
    if capabilities.is_empty() || !capabilities.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(Stop::field("capabilities", "are not capability letters")
            .next("give letters such as goC4w"));
    }
    let creds = Credentials {
        user,
        code: Some(random_code()),
        password: None,
        capabilities: Some(capabilities),
    };
    if !call.dry_run {
        write_credentials(path, &creds, true)?;
    }
    call.log(Op::Fossil {
        operation: format!("keep a new code in {shown}, readable by its owner alone"),
        done: !call.dry_run,
    });
    Ok(creds)
}

/// The server's address: http or https, no password in it, no trailing `/`.
pub(crate) fn server_of(given: &str) -> Result<String, Stop> {
    let refuse = |why: &str| {
        Stop::field("server", format!("{given:?} {why}"))
            .next("give the address the repository is cloned from, such as https://host/repo")
    };
    let url = url::Url::parse(given).map_err(|_| refuse("is not an address"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(refuse("is not an http or https address"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("holds a login; register asks for one"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(refuse("holds a query or a fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// 32 random bytes, as 64 hex digits.
fn random_code() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// This machine's host name as a login: lowercased, anything but letters,
/// digits and dashes made a dash.
fn host_login() -> Result<String, Stop> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let login: String = name
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let login = login.trim_matches('-').to_string();
    if login.is_empty() {
        return Err(
            Stop::field("login", "this machine has no host name to ask for")
                .next("give the login with --login LOGIN"),
        );
    }
    Ok(login)
}

/// The credentials file, if there is one: never through a link, and
/// refused when anyone but its owner may read it.
fn read_credentials(path: &Path) -> Result<Option<Credentials>, Stop> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(
                Stop::field("credentials", format!("cannot open {shown}: {e}"))
                    .next("give a regular file of your own, not a link"),
            );
        }
    };
    let meta = file.metadata().map_err(Stop::internal)?;
    if !meta.is_file() {
        return Err(
            Stop::field("credentials", format!("{shown} is not a regular file"))
                .next("give a regular file of your own"),
        );
    }
    if meta.mode() & 0o077 != 0 || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(Stop::field(
            "credentials",
            format!("{shown} is not yours alone: anyone but its owner may read or write it"),
        )
        .next("make it yours and readable by you alone (chmod 600), or give another file"));
    }
    let mut text = String::new();
    file.take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| Stop::field("credentials", format!("cannot read {shown}: {e}")))?;
    let creds: Credentials = serde_json::from_str(&text).map_err(|e| {
        Stop::field("credentials", format!("{shown} does not read: {e}"))
            .next("give the file register made, or remove it to ask anew")
    })?;
    logins::check_login("credentials", &creds.user)?;
    Ok(Some(creds))
}

/// Writes the credentials file, readable by its owner alone: a new one
/// only where none is (`new`), else whole, in place by a rename.
fn write_credentials(path: &Path, creds: &Credentials, new: bool) -> Result<(), Stop> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    let text = serde_json::to_string_pretty(creds).map_err(Stop::internal)? + "\n";
    let failed = |e: std::io::Error| {
        Stop::field("credentials", format!("cannot write {shown}: {e}"))
            .next("give a file in a directory you may write")
    };
    if new {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(path)
            .map_err(failed)?;
        file.write_all(text.as_bytes()).map_err(failed)?;
        return file.sync_all().map_err(failed);
    }
    let dir: PathBuf = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(failed)?;
    tmp.write_all(text.as_bytes()).map_err(failed)?;
    tmp.as_file().sync_all().map_err(failed)?;
    tmp.persist(path).map_err(|e| failed(e.error))?;
    Ok(())
}

/// What the page's `collect` answers.
#[derive(Deserialize)]
struct Collected {
    #[serde(default)]
    password: String,
}

/// Asks the server's `collect` (an unsigned POST to OCX's page): the
/// password once approved, `None` while it is refused (`collect` refuses
/// one way alone, whatever was wrong).
fn collect(server: &str, login: &str, code: &str) -> Result<Option<String>, Stop> {
    let page = Page::unsigned(server, std::time::Duration::from_secs(60));
    let asked = serde_json::json!({ "login": login, "code": code });
    let unreachable = |why: String| {
        Stop::field("server", format!("{server} did not answer collect: {why}")).next(
            "check the address, and that the server offers OCX's page (ocx-cgi in its --extroot)",
        )
    };
    match page.call::<Collected>("collect", &asked) {
        Ok(c) if c.password.is_empty() => Err(unreachable("it answered no password".into())),
        Ok(c) => Ok(Some(c.password)),
        Err(e) if e.refused() => Ok(None),
        Err(PageError::Stopped(s)) => Err(unreachable(s.stopped.reason)),
        Err(e) => Err(unreachable(e.to_string())),
    }
}
