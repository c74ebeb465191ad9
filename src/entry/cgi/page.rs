//! The page's HTML: the list of tools, a tool's card and form, an answer.

use super::request::{Request, form_fields};
use super::{lacks_capability, offered};
use crate::answer::Answer;
use crate::context::Context;
use crate::fields::{Flag, Kind};
use crate::registry::{self, Entry, Needs, TOOLS};
use serde_json::{Map, Value};

/// The page when it could not be made.
pub(super) fn internal_error() -> String {
    page("OCX", "<p>internal error: the page could not be made</p>")
}

/// A tool's page asking for its form to be filled in.
pub(super) fn fill_in(request: &Request, cx: &Context, tool: &dyn Entry) -> String {
    let mut html = tool_page_head(request, cx);
    html += &format!(
        "<p class=\"ocx-notice\">Fill in the form to run {}.</p>\n",
        esc(tool.name())
    );
    html += &card(request, cx, tool, true, None);
    page("OCX", &html)
}

/// A tool's answer, with why it was a dry run (`notice`), then its card
/// again, filled in from `refill`.
pub(super) fn answer(
    request: &Request,
    cx: &Context,
    tool: &dyn Entry,
    notice: Option<&str>,
    answer: &Answer,
    text: Option<String>,
    refill: Option<&Value>,
) -> String {
    let mut html = tool_page_head(request, cx);
    html += &format!("<h2>{}: the answer</h2>\n", esc(tool.name()));
    if let Some(n) = notice {
        html += &format!("<p class=\"ocx-notice\">{}</p>\n", esc(n));
    }
    html += &render_answer(answer, text);
    html += &card(request, cx, tool, !answer.dry_run, refill);
    page("OCX", &html)
}

/// A refusal made before any tool was found.
pub(super) fn refusal(request: &Request, cx: Option<&Context>, answer: &Answer) -> String {
    let mut html = match cx {
        Some(cx) => tool_page_head(request, cx),
        None => format!(
            "<p><a class=\"ocx-button\" href=\"{}\">&larr; All tools</a></p>\n",
            esc(&request.link(None))
        ),
    };
    html += &render_answer(answer, None);
    page("OCX", &html)
}

/// A tool's page begins: a button back to the list, the bar, the viewer.
fn tool_page_head(request: &Request, cx: &Context) -> String {
    format!(
        "<p><a class=\"ocx-button\" href=\"{}\">&larr; All tools</a></p>\n{}{}",
        esc(&request.link(None)),
        bar(request),
        who(request, cx)
    )
}

/// The OCX page: every tool as a card.
pub(super) fn index(request: &Request, cx: &Context) -> String {
    let mut html = String::new();
    html += &bar(request);
    html += &who(request, cx);
    html += "<p>Every tool OCX offers on this repository. A tool that changes something does so only from a form on this page, as you.</p>\n";
    for tool in TOOLS.iter().filter(|t| offered(**t)) {
        html += &card(request, cx, *tool, true, None);
    }
    page("OCX", &html)
}

/// The bar linking each tool.
fn bar(request: &Request) -> String {
    let mut html = format!(
        "<nav class=\"ocx-bar\"><a href=\"{}\">OCX</a>",
        esc(&request.link(None))
    );
    for tool in TOOLS.iter().filter(|t| offered(**t)) {
        html += &format!(
            " <a href=\"{}\">{}</a>",
            esc(&request.link(Some(tool.name()))),
            esc(tool.name())
        );
    }
    html + "</nav>\n"
}

/// Who the viewer is, as the page proved and as the repository grants.
fn who(request: &Request, cx: &Context) -> String {
    let shown = request
        .capabilities
        .as_deref()
        .map(|c| format!(" (Fossil shows capabilities {})", esc(c)))
        .unwrap_or_default();
    let held = match cx.caller() {
        Ok(c) if c.capabilities.as_str().is_empty() => "; the repository grants none".to_string(),
        Ok(c) => format!(
            "; the repository grants <code>{}</code>",
            esc(c.capabilities.as_str())
        ),
        Err(stop) => format!("; {}", esc(&stop.reason)),
    };
    match request.user.as_deref() {
        Some(u) => {
            format!(
                "<p class=\"ocx-who\">Signed in as <b>{}</b>{shown}{held}.</p>\n",
                esc(u)
            )
        }
        None => format!(
            "<p class=\"ocx-who\">Nobody is signed in{shown}{held}; sign in to change anything.</p>\n"
        ),
    }
}

/// A tool's card: what it does, what it needs (held or not), what it would
/// do now when it changes something and needs no input (`now`), and its
/// form (filled in from `given`), or why there is none.
fn card(
    request: &Request,
    cx: &Context,
    tool: &dyn Entry,
    now: bool,
    given: Option<&Value>,
) -> String {
    let name = tool.name();
    let mut html = format!(
        "<section class=\"ocx-card\" id=\"tool-{0}\">\n<h3><a href=\"{1}\">{0}</a></h3>\n<p>{2}</p>\n",
        esc(name),
        esc(&request.link(Some(name))),
        esc(tool.summary())
    );
    let caller = cx.caller();
    let needs = match tool.needs() {
        Needs::Nothing => "nothing".to_string(),
        Needs::Any(letters) => letters
            .chars()
            .map(|l| {
                let held = caller.as_ref().is_ok_and(|c| c.capabilities.has(l));
                format!(
                    "<span class=\"{}\" title=\"{}\">{l} ({})</span>",
                    if held { "ocx-held" } else { "ocx-not-held" },
                    if held {
                        "you hold it"
                    } else {
                        "you do not hold it"
                    },
                    if held { "held" } else { "not held" }
                )
            })
            .collect::<Vec<_>>()
            .join(" or "),
    };
    html += &format!(
        "<p class=\"ocx-needs\">Needs: {needs}. {}</p>\n",
        if tool.writes() {
            "It may change the repository."
        } else {
            "It only reads."
        }
    );
    let lacks = lacks_capability(tool, cx);
    let refused = if tool.writes() && !request.signed_in() {
        Some("sign in to use it: nobody who has not signed in changes anything here".to_string())
    } else if lacks {
        Some(match &caller {
            Ok(c) => format!(
                "you ({}) hold none of {}, which it needs",
                c.login,
                tool.needs().describe()
            ),
            Err(stop) => stop.reason.clone(),
        })
    } else {
        None
    };
    let fields = form_fields(tool);
    let needs_input = fields.iter().any(|f| f.required);
    let mut refused = refused;
    if now && tool.writes() && !needs_input && refused.is_none() {
        let answer = registry::call(name, Ok(Value::Object(Map::new())), cx, true);
        let nothing_to_fill = fields.iter().all(|f| f.path[0] == "dry_run");
        if let (Some(s), true) = (&answer.stopped, nothing_to_fill) {
            refused = Some(format!(
                "it has nothing to fill in, and it would stop: {}",
                s.reason
            ));
        }
        html += "<div class=\"ocx-now\"><p>What it would do now:</p>\n";
        if let Some(s) = &answer.stopped {
            html += &format!("<p>it would stop: {}</p>\n", esc(&s.reason));
        } else if answer.log.is_empty() {
            html += "<p>nothing</p>\n";
        } else {
            html += "<ul>\n";
            for op in &answer.log {
                html += &format!("<li>{}</li>\n", esc(&op.to_string()));
            }
            html += "</ul>\n";
        }
        html += "</div>\n";
    }
    match refused {
        Some(why) => {
            html += &format!("<p class=\"ocx-noform\">No form: {}.</p>\n", esc(&why));
        }
        None => html += &form(request, tool, &fields, given),
    }
    html + "</section>\n"
}

/// A tool's form: a POST to its own page, a field for each of its
/// input's, filled in from `given` (what the request gave) when there is one.
fn form(request: &Request, tool: &dyn Entry, fields: &[Flag], given: Option<&Value>) -> String {
    let name = tool.name();
    let mut html = format!(
        "<form class=\"ocx-form\" method=\"post\" action=\"{}\" enctype=\"application/x-www-form-urlencoded\">\n",
        esc(&request.link(Some(name)))
    );
    for f in fields {
        let field = &f.path[0];
        let id = esc(&format!("{name}-{field}"));
        let doc = esc(&f.doc);
        let value = given.and_then(|g| g.get(field));
        let text = esc(&value.map(field_text).unwrap_or_default());
        let label = |extra: &str| {
            format!(
                "<label for=\"{id}\" title=\"{doc}\">{}{}{extra}</label>\n",
                esc(field),
                if f.required { " (required)" } else { "" }
            )
        };
        let attrs = format!("id=\"{id}\" name=\"{}\" title=\"{doc}\"", esc(field));
        html += &match f.kind {
            Kind::Boolean => format!(
                "<label title=\"{doc}\"><input type=\"checkbox\" {attrs} value=\"true\"{}> {}</label>\n",
                if value == Some(&Value::Bool(true)) {
                    " checked"
                } else {
                    ""
                },
                esc(field)
            ),
            Kind::Integer => format!(
                "{}<input type=\"number\" step=\"1\" {attrs} value=\"{text}\">\n",
                label("")
            ),
            Kind::Json => format!(
                "{}<textarea rows=\"3\" {attrs}>{text}</textarea>\n",
                label(" (JSON)")
            ),
            Kind::List => format!(
                "{}<input type=\"text\" {attrs} value=\"{text}\">\n",
                label(" (separated by spaces)")
            ),
            Kind::Text if f.doc.contains("Markdown") => {
                format!(
                    "{}<textarea rows=\"5\" {attrs}>{text}</textarea>\n",
                    label("")
                )
            }
            Kind::Text => format!(
                "{}<input type=\"text\" {attrs} value=\"{text}\">\n",
                label("")
            ),
        };
        html += &format!("<small>{doc}</small>\n");
    }
    html += &format!(
        "<p><button type=\"submit\" id=\"{0}-submit\">Run {0}</button></p>\n</form>\n",
        esc(name)
    );
    html
}

/// A field's value as its form shows it: text as it is, a list's items
/// separated by spaces, anything else as JSON.
fn field_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// An answer on the page: the result (or why it stopped) before the log.
fn render_answer(answer: &Answer, text: Option<String>) -> String {
    let mut html = String::new();
    match &answer.stopped {
        Some(s) => {
            html += "<div class=\"ocx-answer ocx-stopped\">\n";
            match &s.field {
                Some(f) => {
                    html += &format!(
                        "<p>Stopped: <b class=\"ocx-field\">{}</b>: {}</p>\n",
                        esc(f),
                        esc(&s.reason)
                    )
                }
                None => html += &format!("<p>Stopped: {}</p>\n", esc(&s.reason)),
            }
            if let Some(n) = &answer.next_step {
                html += &format!("<p>Next: {}</p>\n", esc(n));
            }
        }
        None => {
            html += "<div class=\"ocx-answer ocx-ok\">\n";
            html += &format!(
                "<pre class=\"ocx-result\">{}</pre>\n",
                esc(text.as_deref().unwrap_or(""))
            );
        }
    }
    if answer.dry_run {
        html += "<p class=\"ocx-dry\">Dry run: nothing was written.</p>\n";
    }
    if !answer.log.is_empty() {
        html += "<p>Log:</p>\n<ul class=\"ocx-log\">\n";
        for op in &answer.log {
            html += &format!("<li>{}</li>\n", esc(&op.to_string()));
        }
        html += "</ul>\n";
    }
    html + "</div>\n"
}

/// A whole page: Fossil wraps a `text/html` body whose first element is a
/// `fossil-doc` div in the site's skin, titled by its `data-title`.
fn page(title: &str, inner: &str) -> String {
    format!(
        "<div class=\"fossil-doc\" data-title=\"{}\">\n<style>{STYLE}</style>\n{inner}</div>\n",
        esc(title)
    )
}

/// The page's style: layout only, every colour the skin's own.
const STYLE: &str = "
.ocx-bar { margin: 0.5em 0; }
.ocx-bar a { margin-right: 0.8em; }
.ocx-card { border: 1px solid currentColor; border-radius: 6px; padding: 0.4em 1em; margin: 1em 0; }
.ocx-card h3 { margin: 0.3em 0; }
.ocx-held { font-weight: bold; }
.ocx-not-held { opacity: 0.6; text-decoration: line-through; }
.ocx-form label { display: block; margin-top: 0.5em; font-weight: bold; }
.ocx-form small { display: block; opacity: 0.75; }
.ocx-form input[type=text], .ocx-form input[type=number], .ocx-form textarea {
  width: 100%; box-sizing: border-box; color: inherit; background: transparent;
  border: 1px solid currentColor; border-radius: 3px; padding: 0.2em; font: inherit; }
.ocx-answer { border-left: 4px solid currentColor; padding: 0.1em 0.8em; margin: 1em 0; }
.ocx-result { white-space: pre-wrap; }
.ocx-notice, .ocx-noform, .ocx-dry { font-style: italic; }
.ocx-button { display: inline-block; border: 1px solid currentColor; border-radius: 4px; padding: 0.1em 0.6em; text-decoration: none; color: inherit; }
";

/// `text` escaped as HTML, for an element's text or an attribute's value.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
