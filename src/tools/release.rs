//! OCX's own releases of its page, and what `stage`, `accept` and
//! `rollback` share: a release root of the administrator's, holding
//! `release.json` (the build and gate commands and where the built
//! program is, never the check-in's), `staged/CHECKIN` (a check-in's
//! files, what its build and gate printed, the program built and its
//! SHA-256 inventory), and the links `next` (the build staged last,
//! served as `ocx-cgi-next` beside the page), `current` (the one serving
//! as `ocx-cgi`) and `previous`. Each changes under the root's one lock,
//! each link put in place whole (a new link renamed over the old), so
//! a failure leaves the current one serving. `release` lists them.

use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The administrator's file of a release root.
pub const CONFIG: &str = "release.json";

/// The repository's config row naming its release root.
pub const ROOT_ROW: &str = "ocx-release-root";

/// What a staged build's build and gate printed, as they ran.
pub const GATE_LOG: &str = "gate.log";

/// What the administrator's `release.json` says.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootConfig {
    /// The build's command line, run in the check-in's files.
    pub build: Vec<String>,
    /// The gate's (its tests), run after the build.
    pub gate: Vec<String>,
    /// Where the build leaves the program, relative to the check-in's files.
    pub artifact: String,
    /// The directory Fossil serves as its extroot, where `ocx-cgi` and
    /// `ocx-cgi-next` are linked to the current and the next release.
    #[serde(default)]
    pub extroot: Option<PathBuf>,
    /// The wall-clock time the build and the gate are each given.
    #[serde(default = "an_hour")]
    pub wall: String,
    /// Whether the build shares the host's network (to fetch what it needs).
    #[serde(default)]
    pub network: bool,
    /// Host paths the build may read (a toolchain, a cache of its sources).
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// Environment variables the build and the gate get (where a toolchain
    /// keeps itself: `CARGO_HOME`, `RUSTUP_HOME`); never `PATH`, `HOME` or
    /// `USER`, which OCX sets ([`env_refusal`]).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Why `release.json`'s `env` may not name `name`, if it may not: only a
/// plain variable name (ASCII letters, digits and `_`, not starting with a
/// digit), and none OCX sets itself, so what finds a program (`PATH`) and
/// where the build keeps its own files (`HOME`) stay as the sandbox makes
/// them.
pub fn env_refusal(name: &str) -> Option<&'static str> {
    let plain = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !plain {
        Some("is not a plain variable name (letters, digits and '_', not starting with a digit)")
    } else if matches!(name, "PATH" | "HOME" | "USER") {
        Some(
            "is set by OCX: PATH to the command's directory then the system's, HOME to the build's own fresh home, USER to its account",
        )
    } else {
        None
    }
}

fn an_hour() -> String {
    "1h".into()
}

/// What a staged build keeps of itself (`staged/CHECKIN/release.json`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct Built {
    /// The check-in it was built from, in full.
    pub checkin: String,
    /// When it was built (UTC).
    pub built: String,
    /// Each file of its `bin/` and its SHA-256.
    pub inventory: BTreeMap<String, String>,
}

/// A release root, opened.
pub struct Root {
    pub dir: PathBuf,
    pub config: RootConfig,
    /// The root the repository's configuration names ([`ROOT_ROW`]), if any.
    pub kept: Option<String>,
}

impl Root {
    /// Whether this is the root the repository's configuration names.
    pub fn is_kept(&self) -> bool {
        self.kept.as_deref() == Some(self.dir.display().to_string().as_str())
    }
}

/// The links a release root keeps.
pub const CURRENT: &str = "current";
pub const PREVIOUS: &str = "previous";
pub const NEXT: &str = "next";

impl Root {
    /// The release root `given` names, else the one the repository's
    /// configuration names ([`ROOT_ROW`]), opened.
    pub fn given_or_kept(call: &Call, given: Option<&str>) -> Result<Root, Stop> {
        let kept = match call.repo() {
            Ok(repo) => repo.config(ROOT_ROW)?,
            Err(_) => None,
        };
        match given.map(str::to_string).or(kept.clone()) {
            Some(dir) => Ok(Root {
                kept,
                ..Root::open(call, &dir)?
            }),
            None => Err(Stop::field(
                "root",
                "no release root is given, and the repository's configuration names none",
            )
            .next("give --root DIR, a directory holding the administrator's release.json")),
        }
    }

    /// The release root `given` names: its `release.json` read, refused
    /// naming `root` when there is none, it does not read, the root or the
    /// file is a symbolic link, or another account than the caller's may
    /// change either (whoever may change the root may swap the links that
    /// say what the page runs).
    fn open(call: &Call, given: &str) -> Result<Root, Stop> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let named = call.cx.cwd.join(given);
        let unreadable = |path: &Path, e: std::io::Error| {
            Stop::field("root", format!("{} cannot be read: {e}", path.display()))
                .next("give a directory holding the administrator's release.json")
        };
        let linked = std::fs::symlink_metadata(&named).map_err(|e| unreadable(&named, e))?;
        if linked.file_type().is_symlink() {
            return Err(Stop::field(
                "root",
                format!(
                    "{} is a symbolic link: whoever may change a link may point it at another root",
                    named.display()
                ),
            )
            .next("give the release root's own directory"));
        }
        let dir = named.canonicalize().map_err(|e| unreadable(&named, e))?;
        let me = nix::unistd::geteuid().as_raw();
        let theirs = |meta: &std::fs::Metadata| meta.uid() != me || meta.mode() & 0o022 != 0;
        let dir_meta = std::fs::metadata(&dir).map_err(|e| unreadable(&dir, e))?;
        if !dir_meta.is_dir() || theirs(&dir_meta) {
            return Err(Stop::field(
                "root",
                format!(
                    "{} is not the caller's own directory, or others may change it",
                    dir.display()
                ),
            )
            .next(format!(
                "make it a directory of this account's and chmod go-w {}",
                dir.display()
            )));
        }
        let file = dir.join(CONFIG);
        let mut opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&file)
            .map_err(|e| {
                Stop::field("root", format!("{} cannot be read, or is a symbolic link: {e}", file.display()))
                    .next(format!("write {CONFIG} there: {{\"build\": [...], \"gate\": [...], \"artifact\": \"PATH\"}}"))
            })?;
        let meta = opened.metadata().map_err(Stop::internal)?;
        if theirs(&meta) {
            return Err(Stop::field(
                "root",
                format!(
                    "{} is not the caller's own, or others may change it",
                    file.display()
                ),
            )
            .next(format!(
                "chown it to this account and chmod go-w {}",
                file.display()
            )));
        }
        let mut text = Vec::new();
        opened.read_to_end(&mut text).map_err(Stop::internal)?;
        let config: RootConfig = serde_json::from_slice(&text).map_err(|e| {
            Stop::field("root", format!("{} does not read: {e}", file.display()))
                .next("correct the administrator's release.json")
        })?;
        if config.build.is_empty() || config.gate.is_empty() {
            return Err(Stop::field(
                "root",
                format!("{} names no build or no gate command", file.display()),
            )
            .next("name both commands"));
        }
        if let Some((name, why)) = config
            .env
            .keys()
            .find_map(|k| env_refusal(k).map(|why| (k, why)))
        {
            return Err(Stop::field(
                "root",
                format!("{}'s env names {name:?}, which {why}", file.display()),
            )
            .next("name in env only the variables the build needs besides PATH, HOME and USER"));
        }
        Ok(Root {
            dir,
            config,
            kept: None,
        })
    }

    /// The root's one lock, held while the returned guard lives.
    pub fn lock(&self) -> Result<crate::lock::Held, Stop> {
        crate::lock::take(&self.dir.join("lock"), false)
            .map_err(Stop::internal)?
            .ok_or_else(|| {
                Stop::new("another stage, accept or rollback holds the release root's lock")
                    .next("wait for it to end, then try again")
            })
    }

    /// The staged build of check-in `hash`.
    pub fn staged(&self, hash: &str) -> PathBuf {
        self.dir.join("staged").join(&hash[..16.min(hash.len())])
    }

    /// The staged build link `name` leads to, if it leads to one.
    pub fn linked(&self, name: &str) -> Option<PathBuf> {
        let target = std::fs::read_link(self.dir.join(name)).ok()?;
        let full = self.dir.join(target);
        full.is_dir().then_some(full)
    }

    /// What the staged build in `dir` keeps of itself.
    pub fn built(dir: &Path) -> Option<Built> {
        serde_json::from_slice(&std::fs::read(dir.join(CONFIG)).ok()?).ok()
    }

    /// Points link `name` at the staged build `dir` (none: removes it), a
    /// new link put in place whole over the old.
    pub fn link(&self, name: &str, dir: Option<&Path>) -> std::io::Result<()> {
        let path = self.dir.join(name);
        let Some(dir) = dir else {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        };
        let relative = dir.strip_prefix(&self.dir).unwrap_or(dir);
        let tmp = self.dir.join(format!(".{name}.new"));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(relative, &tmp)?;
        std::fs::rename(&tmp, &path)
    }

    /// Links Fossil's extroot's `ocx-cgi` and `ocx-cgi-next` to the
    /// current and the next release's page (its hand-off program, else its program),
    /// when the root names it.
    pub fn link_extroot(&self) -> std::io::Result<()> {
        let Some(ext) = &self.config.extroot else {
            return Ok(());
        };
        for (name, link) in [("ocx-cgi", CURRENT), ("ocx-cgi-next", NEXT)] {
            let bin = self.dir.join(link).join("bin");
            let target = match bin.join(HANDOFF).is_file() {
                true => bin.join(HANDOFF),
                false => bin.join("ocx"),
            };
            let path = ext.join(name);
            if std::fs::read_link(&path).ok().as_deref() == Some(target.as_path()) {
                continue;
            }
            let tmp = ext.join(format!(".{name}.new"));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp)?;
            std::fs::rename(&tmp, &path)?;
        }
        Ok(())
    }
}

/// The page's hand-off program, which a build may make beside its program
/// and a release keeps beside it in `bin` (`src/entry/cgi/handoff.rs`).
pub const HANDOFF: &str = "ocx-cgi";

/// The release this running program is, when it is a staged build's
/// `bin/ocx` (as `ocx-cgi` and `ocx-cgi-next` lead to it); read once a
/// process, since a running program's file and its build never change
/// (the page server asks at every request).
pub fn of_this_program() -> Option<Built> {
    static THIS: std::sync::OnceLock<Option<Built>> = std::sync::OnceLock::new();
    THIS.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        Root::built(exe.parent()?.parent()?)
    })
    .clone()
}

/// The SHA-256 of each file of `dir/bin`.
pub fn inventory(dir: &Path) -> std::io::Result<BTreeMap<String, String>> {
    use sha2::Digest;
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir.join("bin"))? {
        let e = e?;
        let bytes = std::fs::read(e.path())?;
        out.insert(
            e.file_name().to_string_lossy().into_owned(),
            hex::encode(sha2::Sha256::digest(&bytes)),
        );
    }
    Ok(out)
}

/// Input of `release`, `accept` and `rollback`: the release root.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The release root (holding the administrator's release.json); without it, the one the repository's configuration names.
    #[serde(default)]
    pub root: Option<String>,
}

/// What serves once `accept` or `rollback` has moved the links (a dry
/// run: what would).
#[derive(Serialize, JsonSchema)]
pub struct Serving {
    /// The release current now.
    pub current: Built,
    /// The one kept as previous, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<Built>,
}

/// A release as `release` lists it.
#[derive(Serialize, JsonSchema)]
pub struct Listed {
    /// Which it is: current, previous, next, or staged.
    pub is: String,
    #[serde(flatten)]
    pub built: Built,
    /// Whether its files still match its inventory.
    pub intact: bool,
}

/// What `release` lists.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    pub releases: Vec<Listed>,
}

/// The `release` tool.
pub struct Release;

impl Tool for Release {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "release";
    const SUMMARY: &'static str = "The releases of OCX's page in a release root: current, previous, next and staged, each with the check-in it came from and its SHA-256 inventory.";
    const NEEDS: Needs = Needs::Any("s");
    const WRITES: bool = false;
    const REACH: Reach = Reach::NotMcp;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let root = Root::given_or_kept(call, input.root.as_deref())?;
        call.read(format!("the release root {}", root.dir.display()));
        let named: Vec<(&str, PathBuf)> = [CURRENT, PREVIOUS, NEXT]
            .into_iter()
            .filter_map(|name| Some((name, root.linked(name)?)))
            .collect();
        let mut staged: Vec<PathBuf> = std::fs::read_dir(root.dir.join("staged"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|dir| !named.iter().any(|(_, d)| d == dir))
            .collect();
        staged.sort();
        let releases = named
            .into_iter()
            .chain(staged.into_iter().map(|dir| ("staged", dir)))
            .filter_map(|(is, dir)| {
                let built = Root::built(&dir)?;
                Some(Listed {
                    is: is.into(),
                    intact: inventory(&dir).is_ok_and(|i| i == built.inventory),
                    built,
                })
            })
            .collect();
        Ok(Output { releases })
    }
}
