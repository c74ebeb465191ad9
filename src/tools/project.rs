//! `project`: from a git repository (or from nothing) to a served OCX node
//! in one command, on the host that will serve it: the git repository
//! mirrored beside the new Fossil repository and imported with its
//! branches and tags (Fossil's and git's marks kept, so `upstream` brings
//! it up later), its git export made, OCX's hook installed and its node
//! started when the URL it will be served at is given, the shipped runner
//! pages and example patterns asked for written; then the commands left
//! to run. A dry run lists every step and checks what it can (the name,
//! the place, that git reads the upstream).

use crate::answer::Op;
use crate::context::{Context, Who};
use crate::stop::Stop;
use crate::tool::{Call, Needs, Reach, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Input of `project`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The project's name: a file name (letters, digits, ., _ and -); NAME.fossil is made.
    pub name: String,
    /// The git repository to make it from: a URL git reads (its password never kept), or a directory. Without it, a new empty repository.
    #[serde(default)]
    pub from: Option<String>,
    /// The directory to make it in (default: this one).
    #[serde(default)]
    pub dir: Option<String>,
    /// The URL it will be served at (http or https): with it the hook is installed and the node started.
    #[serde(default)]
    pub url: Option<String>,
    /// Shipped runner pages to write (claude, codex, local, demo).
    #[serde(default)]
    pub runners: Vec<String>,
    /// Also write the example patterns for the first runner named.
    #[serde(default)]
    pub patterns: bool,
    /// Its administrator's login (default: admin).
    #[serde(default)]
    pub admin: Option<String>,
}

/// What `project` made, and what is left to do.
#[derive(Serialize, JsonSchema)]
pub struct Output {
    /// The new repository.
    pub repository: String,
    /// Its git export.
    pub git_export: String,
    /// Where its upstream is kept (made from git).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The branches and tags brought from git, when made from git (absent in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imported: Option<crate::git::upstream::Brought>,
    /// Its node's root, when its hook was installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The runner pages and patterns written.
    pub pages: Vec<String>,
    /// The commands left to run, each as it runs, after a colon saying what it does.
    pub next: Vec<String>,
}

/// The `project` tool.
pub struct Project;

/// Whether `name` can name a project: a plain file name.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

impl Tool for Project {
    type Input = Input;
    type Output = Output;
    const NAME: &'static str = "project";
    const SUMMARY: &'static str = "Make a served OCX project on this host: a new Fossil repository (from a git repository, its branches and tags, kept in step by upstream), its git export, its node, its runner pages.";
    const NEEDS: Needs = Needs::Nothing;
    const WRITES: bool = true;
    const REACH: Reach = Reach::CommandLine;

    fn run(input: Input, call: &mut Call) -> Result<Output, Stop> {
        let places = places(&input, call)?;
        check_serving(&input)?;
        let git = crate::git::Git::locate(None).map_err(Stop::internal)?;
        if let Some(from) = &input.from {
            check_from(&git, from, call)?;
        }
        let Places {
            admin,
            path,
            export,
            upstream_dir,
        } = places;
        let mut out = Output {
            repository: path.display().to_string(),
            git_export: export.display().to_string(),
            upstream: input
                .from
                .as_ref()
                .map(|_| upstream_dir.display().to_string()),
            imported: None,
            node: None,
            pages: Vec::new(),
            next: Vec::new(),
        };
        out.imported = make_repository(&input, &git, &path, &export, &admin, call)?;
        let shown = shlex::try_quote(&path.to_string_lossy())
            .unwrap_or_default()
            .into_owned();
        let made = Made {
            cx: Context::new(
                Some(path.clone()),
                call.cx.cwd.clone(),
                Who::Local {
                    user: Some(admin.clone()),
                },
            ),
            shown: shown.clone(),
        };
        serve(&input, &made, &mut out, call)?;
        write_runners(&input, &made, &mut out, call)?;
        out.next.insert(
            0,
            format!(
                "serve it: fossil server --port PORT --extroot EXT {} (EXT a directory holding ocx-cgi linked there, and ocx linked as git for the export)",
                shown
            ),
        );
        out.next.insert(
            1,
            format!(
                "give its administrator a password: fossil user password {admin} -R {}",
                shown
            ),
        );
        if input.from.is_some() {
            out.next.push(format!(
                "keep it in step with its upstream: ocx upstream --every 1h -R {}",
                shown
            ));
        }
        Ok(out)
    }
}

/// Where a new project goes and who administers it, checked free.
struct Places {
    admin: String,
    /// The new repository, NAME.fossil.
    path: PathBuf,
    /// Its git export, NAME.git.
    export: PathBuf,
    /// Where its upstream is kept.
    upstream_dir: PathBuf,
}

/// The project's name, administrator and directory checked, and the
/// places it will take refused if anything is there already.
fn places(input: &Input, call: &Call) -> Result<Places, Stop> {
    if !valid_name(&input.name) {
        return Err(Stop::field(
            "name",
            format!(
                "{:?} is not a file name (letters, digits, ., _ and -)",
                input.name
            ),
        )
        .next("give a plain name, such as my-project"));
    }
    let admin = input.admin.clone().unwrap_or_else(|| "admin".into());
    if !crate::node::runner::valid_name(&admin) {
        return Err(
            Stop::field("admin", format!("{admin:?} is not a login's name"))
                .next("give lower-case letters, digits, - and _"),
        );
    }
    let dir = match &input.dir {
        Some(d) => call.cx.cwd.join(d),
        None => call.cx.cwd.clone(),
    };
    if !dir.is_dir() {
        return Err(
            Stop::field("dir", format!("{} is no directory", dir.display()))
                .next("make the directory first, or name another"),
        );
    }
    let dir = dir.canonicalize().map_err(Stop::internal)?;
    let path = dir.join(format!("{}.fossil", input.name));
    let export = dir.join(format!("{}.git", input.name));
    let upstream_dir = crate::git::upstream::dir_of(&path);
    for taken in [&path, &export, &upstream_dir] {
        if taken.exists() {
            return Err(
                Stop::field("name", format!("{} is there already", taken.display()))
                    .next("choose another name, or remove what is there"),
            );
        }
    }
    Ok(Places {
        admin,
        path,
        export,
        upstream_dir,
    })
}

/// The URL it will be served at, the runner pages and the patterns asked
/// for, checked.
fn check_serving(input: &Input) -> Result<(), Stop> {
    if let Some(u) = &input.url
        && !(u.starts_with("http://") || u.starts_with("https://"))
    {
        return Err(
            Stop::field("url", format!("{u:?} is not an http or https URL"))
                .next("give the URL the repository will be served at"),
        );
    }
    for (i, r) in input.runners.iter().enumerate() {
        if !["claude", "codex", "local", "demo"].contains(&r.as_str()) {
            return Err(Stop::field(
                format!("runners[{i}]"),
                format!("OCX ships no runner {r:?}"),
            )
            .next("give claude, codex, local or demo"));
        }
    }
    if input.patterns && input.runners.is_empty() {
        return Err(Stop::field(
            "patterns",
            "the patterns are written for a runner: name one",
        )
        .next("give runners, such as demo"));
    }
    Ok(())
}

/// `from` refused if git may not reach it that way, then asked of git.
fn check_from(git: &crate::git::Git, from: &str, call: &mut Call) -> Result<(), Stop> {
    if let Some(why) = crate::git::upstream::refused_from(from) {
        return Err(Stop::field(
            "from",
            format!(
                "{}: {why}",
                crate::fossil::redact_password(&from.escape_debug().to_string())
            ),
        )
        .next("give a git URL (https, http, ssh, git or file) or a directory"));
    }
    call.read(format!(
        "whether git reads {}",
        crate::fossil::redact_password(from)
    ));
    git.can_read(from).map_err(|e| {
        Stop::field("from", format!("git cannot read it: {e}"))
            .next("give a git URL or directory git can read from here")
    })
}

/// Logs one step of the making, done unless the call is a dry run.
fn step(call: &mut Call, operation: String) {
    let done = !call.dry_run;
    call.log(Op::Fossil { operation, done })
}

/// The repository made (imported from git, or empty), `admin` its
/// default user, and its git export made; what came from git returned.
fn make_repository(
    input: &Input,
    git: &crate::git::Git,
    path: &Path,
    export: &Path,
    admin: &str,
    call: &mut Call,
) -> Result<Option<crate::git::upstream::Brought>, Stop> {
    let fossil = call.fossil()?.clone();
    let dry = call.dry_run;
    let mut imported = None;
    match &input.from {
        Some(from) => {
            step(
                call,
                format!(
                    "mirror {} and import its branches (its default as trunk) and tags into {}",
                    crate::fossil::redact_password(from),
                    path.display()
                ),
            );
            if !dry {
                let (_, brought) =
                    crate::git::upstream::Upstream::import_new(git, &fossil, path, from, admin)
                        .map_err(|e| {
                            Stop::field("from", e.to_string()).next(
                                "mend what it names; remove what was made, then run project again",
                            )
                        })?;
                imported = Some(brought);
            }
        }
        None => {
            step(
                call,
                format!("make the empty repository {}", path.display()),
            );
            if !dry {
                fossil.new_repository(path, admin)?;
            }
        }
    }
    step(
        call,
        format!(
            "make {admin} its default user, so the commands below act as {admin} without --user"
        ),
    );
    if !dry {
        fossil.user_default(path, admin)?;
    }
    step(call, format!("make its git export in {}", export.display()));
    if !dry {
        fossil.git_export_into(path, export)?;
    }
    Ok(imported)
}

/// The new repository as the steps after its making reach it.
struct Made {
    /// A call's context on it, as its administrator.
    cx: Context,
    /// Its path, quoted for the commands left to run.
    shown: String,
}

/// With a URL, OCX's hook installed and the node started on the new
/// repository; without, the commands that do it left in `out`.
fn serve(input: &Input, made: &Made, out: &mut Output, call: &mut Call) -> Result<(), Stop> {
    let (sub, shown) = (&made.cx, &made.shown);
    let Some(url) = &input.url else {
        out.next.push(format!(
            "once you know the URL it is served at (URL): ocx hook install --url URL -R {}",
            shown
        ));
        out.next
            .push(format!("then start its node: ocx node start -R {}", shown));
        return Ok(());
    };
    step(
        call,
        format!("install OCX's hook, the repository served at {url}"),
    );
    step(call, "start its node".into());
    if call.dry_run {
        return Ok(());
    }
    let hooked = within(call, sub, |c| {
        super::hook::Hook::run(
            super::hook::Input {
                action: super::hook::HookAction::Install,
                url: Some(url.clone()),
                root: None,
            },
            c,
        )
    })?;
    out.node = hooked.root;
    within(call, sub, |c| {
        super::node::NodeTool::run(
            super::node::Input {
                action: super::node::NodeAction::Start,
                foreground: false,
                runs: false,
                last: None,
                metrics: None,
                otlp: None,
            },
            c,
        )
    })?;
    Ok(())
}

/// The runner pages asked for written on the new repository, the
/// first with the example patterns when asked; without a URL, the
/// commands that write them left in `out`.
fn write_runners(
    input: &Input,
    made: &Made,
    out: &mut Output,
    call: &mut Call,
) -> Result<(), Stop> {
    let (sub, shown) = (&made.cx, &made.shown);
    for (i, name) in input.runners.iter().enumerate() {
        let patterns = input.patterns && i == 0;
        step(
            call,
            format!(
                "write the runner page sandbox/{name}{}",
                if patterns {
                    " and the example patterns"
                } else {
                    ""
                }
            ),
        );
        if call.dry_run {
            continue;
        }
        if input.url.is_none() {
            out.next.push(format!(
                "then the runner page: ocx runner --name {name}{} -R {}",
                if patterns { " --patterns" } else { "" },
                shown
            ));
            continue;
        }
        let written = within(call, sub, |c| {
            super::runner::Runner::run(
                super::runner::Input {
                    name: name.clone(),
                    model: None,
                    base_url: None,
                    api_key: None,
                    login: None,
                    remote: false,
                    terminal: false,
                    patterns,
                },
                c,
            )
        })?;
        out.pages.push(written.page);
        out.pages.extend(written.patterns);
        out.next.extend(written.still_to_do);
    }
    Ok(())
}

/// Runs `tool` on the new repository `cx` names, as a part of `call`: its
/// log added to the call's.
fn within<T>(
    call: &mut Call,
    cx: &Context,
    tool: impl FnOnce(&mut Call) -> Result<T, Stop>,
) -> Result<T, Stop> {
    let mut part = Call {
        cx,
        dry_run: call.dry_run,
        log: Vec::new(),
        tools: call.tools,
    };
    let done = tool(&mut part);
    call.log.extend(part.log);
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_projects_name_is_a_plain_file_name() {
        assert!(valid_name("my-project.v2"));
        for bad in ["", ".hidden", "-x", "a/b", "a b", "../x", &"x".repeat(101)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
