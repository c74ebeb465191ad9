//! The page's HTML, written with `maud`: every text spliced in is escaped
//! unless it is marked as HTML, so no page text reaches the page unescaped.

use super::request::{Request, form_fields};
use super::{lacks_capability, offered};
use crate::answer::Answer;
use crate::context::Context;
use crate::fields::{Flag, Kind};
use crate::node::transcript::{self, Said};
use crate::registry;
use crate::tool::{Entry, Needs};
use crate::tools::run;
use maud::{Markup, PreEscaped, html};
use serde_json::{Map, Value};

/// The page when it could not be made.
pub(super) fn internal_error() -> String {
    page(
        "OCX",
        html! { p { "internal error: the page could not be made" } },
    )
}

/// The OCX page: every tool as a card.
pub(super) fn index(request: &Request, cx: &Context) -> String {
    page(
        "OCX",
        html! {
            (bar(request))
            (who(request, cx))
            (release(request))
            p { "Every tool OCX offers on this repository. A tool that changes something does so only from a form on this page, as you." }
            @for group in registry::GROUPS {
                @let tools = grouped(group);
                @if !tools.is_empty() {
                    section.ocx-group id=(group_id(group)) {
                        h2 { (group.title) }
                        p { (group.about) "." }
                        @for tool in tools {
                            (card(request, cx, tool, true, None))
                        }
                    }
                }
            }
        },
    )
}

/// A tool's page asking for its form to be filled in.
pub(super) fn fill_in(request: &Request, cx: &Context, tool: &dyn Entry) -> String {
    page(
        "OCX",
        html! {
            (tool_page_head(request, cx))
            p.ocx-notice { "Fill in the form to run " (tool.name()) "." }
            (card(request, cx, tool, true, None))
        },
    )
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
    page(
        "OCX",
        html! {
            (tool_page_head(request, cx))
            h2 { (tool.name()) ": the answer" }
            @if let Some(n) = notice {
                p.ocx-notice { (n) }
            }
            (render_answer(&request.uri, answer, text))
            (card(request, cx, tool, !answer.dry_run, refill))
        },
    )
}

/// A refusal made before any tool was found.
pub(super) fn refusal(request: &Request, cx: Option<&Context>, answer: &Answer) -> String {
    page(
        "OCX",
        html! {
            @match cx {
                Some(cx) => (tool_page_head(request, cx)),
                None => (back(request)),
            }
            (render_answer(&request.uri, answer, None))
        },
    )
}

/// The console: what waits on the viewer (each option a button that posts
/// the decision as the viewer) and what the runs are doing; `written`,
/// what a press just wrote or why it wrote nothing. The list of tools is
/// one link away.
pub(super) fn console(
    request: &Request,
    cx: &Context,
    view: &Answer,
    written: Option<Markup>,
    new_run: Option<&[(Value, Answer)]>,
) -> String {
    let result = view.result.as_ref();
    let list = |key: &str| -> Vec<Value> {
        result
            .and_then(|r| r.get(key))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let for_login = result
        .and_then(|r| r.get("for"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let (waiting, to_confirm) = (list("waiting"), list("to_confirm"));
    let (running, ended) = (list("running"), list("ended"));
    let live = live_console(request, cx);
    page(
        "OCX console",
        html! {
            @if let Some((last, nonce)) = &live {
                div #ocx-console hidden data-last=(last) data-wait=(request.link(Some("wait"))) {}
                p.ocx-notice #ocx-arrived hidden { "Something new arrived: " a href=(request.link(Some("console"))) { "show it" } "." }
                script nonce=(nonce) { (PreEscaped(CONSOLE_SCRIPT)) }
            }
            p { a.ocx-button href=(request.link(Some(super::TOOL_LIST))) id="ocx-tools" { "All tools " (PreEscaped("&rarr;")) } }
            (who(request, cx))
            @if let Some(w) = written {
                p.ocx-written id="ocx-written" { (w) }
            }
            @if let Some(s) = &view.stopped {
                p.ocx-notice { "The console cannot be shown: " (s.reason) }
            }
            h2 { "Waiting on " (for_login) }
            @if waiting.is_empty() { p.ocx-notice { "No question waits on you." } }
            @for q in &waiting { (console_question(request, q)) }
            @if !to_confirm.is_empty() {
                h2 { "Yours to close, as an administrator" }
                @for q in &to_confirm { (console_question(request, q)) }
            }
            h2 { "Running" }
            @if running.is_empty() { p.ocx-notice { "No run is running." } }
            @for r in &running { (console_run(request, r)) }
            h2 { "Ended lately" }
            @if ended.is_empty() { p.ocx-notice { "No run ended lately." } }
            @for r in &ended { (console_run(request, r)) }
            @if let Some(patterns) = new_run {
                h2 id="new-run" { "New run" }
                p { "Each pattern (a wiki page run/NAME an administrator wrote) as the record it would write, as you, now. The record states the whole boundary; the pattern limits nothing." }
                @if patterns.is_empty() { p.ocx-notice { "No pattern counts yet: an administrator writes the wiki page run/NAME, its first JSON block a record's fields." } }
                @for (p, dry) in patterns { (pattern_card(request, p, dry)) }
                h3 { "A record from scratch" }
                @if let Some(create) = registry::find("create") { (card(request, cx, create, false, None)) }
            }
        },
    )
}

/// How many of a transcript's last entries a run's page sends, when its
/// script can fetch the earlier ones.
pub(super) const SHOWN: usize = 40;

/// A run's page: its record as a table, its state and spend, and its
/// transcript, each tool's result and command's output folded. On a page
/// given Fossil's nonce, only the last [`SHOWN`] entries are sent, and no
/// folded output: a script asks the page's own JSON for the earlier
/// entries when a person asks, and for an output once a person opens it
/// (a long transcript is most of a page's bytes, mostly outputs no one
/// opens, and Fossil relays each byte the page writes); while the run
/// runs, it asks the same JSON for what comes next and adds it without
/// a reload.
pub(super) fn run(request: &Request, cx: &Context, answer: Answer<run::Output>) -> String {
    let Some(o) = answer.result.as_ref().filter(|_| answer.stopped.is_none()) else {
        let answer = answer.map_result(|_| Value::Null);
        return page(
            "OCX run",
            html! { (tool_page_head(request, cx)) (render_answer(&request.uri, &answer, None)) },
        );
    };
    let f = &o.fields;
    let record = o.record.as_str();
    let json = |v: &Value| match v {
        Value::Null => "none".to_string(),
        v => serde_json::to_string(v).unwrap_or_default(),
    };
    let running = o.state == "running";
    let nonce = request
        .nonce
        .as_deref()
        .filter(|_| o.transcript_withheld.is_none());
    let live = running && nonce.is_some();
    // With a script to fetch the rest, only the last entries are sent.
    let shown = match nonce {
        Some(_) => &o.transcript[o.transcript.len().saturating_sub(SHOWN)..],
        None => &o.transcript[..],
    };
    // Entries are numbered from 1, so those before the first shown are
    // counted without reading them.
    let earlier = shown.first().map_or(0, |e| e.seq.saturating_sub(1));
    page(
        "OCX run",
        html! {
            (tool_page_head(request, cx))
            h2 { "Run: " (text_of(f, "objective")) }
            p.ocx-links {
                a href=(format!("{}/forumpost/{record}", request.uri)) { "its thread" }
                " · record "
                a.ocx-hash href=(format!("{}/info/{record}", request.uri)) { (record) }
            }
            table.ocx-record {
                tr { th { "objective" } td { (text_of(f, "objective")) } }
                tr { th { "runner" } td { (text_of(f, "runner")) } }
                tr { th { "login" } td { (text_of(f, "user")) } }
                tr { th { "node" } td { code { (text_of(f, "node")) } @if f["remote"] == Value::Bool(true) { " (an agent machine)" } } }
                tr { th { "wakes on" } td { "check-ins on: " (run::names(&f["checkins"])) } }
                tr { th { "hears" } td { (run::names(&f["hears"])) } }
                tr { th { "sandbox" } td { code { (json(&f["sandbox"])) } } }
                tr { th { "budget" } td { code { (json(&f["budget"])) } } }
                tr { th { "restrictions" } td { code { (json(&f["restrict"])) } } }
                tr { th { "pattern" } td { code { (json(&f["pattern"])) } } }
                tr { th { "sent by" } td { (o.sent_by.as_deref().unwrap_or("")) " at " (o.since) } }
                @if let Some(trace) = &o.trace { tr { th { "trace" } td { code.ocx-trace { (trace) } } } }
            }
            p.ocx-state id="ocx-state" {
                @if let Some(outcome) = &o.outcome {
                    "Ended " b { (outcome) } @if let Some(n) = &o.note { ": " (n) }
                } @else {
                    "Running" @if let Some(w) = o.wall_left { ", " (w) " s of its wall left" }
                    @if let Some(n) = &o.next_slot { ", its schedule's next slot " (n) }
                }
            }
            p.ocx-spend id="ocx-spend" {
                @if let Some(s) = &o.spent { "Spent: " (s) }
                @else if let Some(t) = o.tokens { "Spent: " (t) " tokens" }
            }
            h3 { "Transcript" }
            @if let Some(why) = &o.transcript_withheld {
                p.ocx-notice id="ocx-withheld" { "No transcript: " (why) "." }
            }
            @if earlier > 0 {
                p.ocx-notice id="ocx-earlier" {
                    (earlier) " earlier entries are not shown. "
                    button type="button" { "Show them" }
                }
            }
            ol.ocx-transcript id="ocx-transcript" data-last=(o.last) data-first=[(earlier > 0).then(|| shown[0].seq)] data-live[live] {
                @for e in shown { (transcript_entry(e, nonce.is_some())) }
            }
            @if let Some(nonce) = nonce {
                script nonce=(nonce) { (PreEscaped(RUN_SCRIPT)) }
            }
        },
    )
}

/// One transcript entry as a list item: words as a quotation, a call with
/// its arguments, a result or a command's output folded; the output left
/// for [`RUN_SCRIPT`] to fetch when `fetched`, the fold marked with the
/// entry's number.
fn transcript_entry(e: &transcript::Entry, fetched: bool) -> Markup {
    html! {
        li class=(format!("ocx-{}", e.said.kind())) {
            time { (e.at) } " "
            @match &e.said {
                Said::Delivery { text } => { b { "Delivered" } blockquote { (text) } },
                Said::Words { text } => { b { "Said" } blockquote { (text) } },
                Said::ToolCall { name, arguments, .. } => { b { "Called " } code { (name) } " " code { (arguments.to_string()) } },
                Said::ToolResult { output, error, .. } => details data-fetch=[fetched.then_some(e.seq)] {
                    summary { b { @if *error { "Failed" } @else { "Answered" } } }
                    @if !fetched { pre { (output) } }
                },
                Said::Command { command, output, exit } => details data-fetch=[fetched.then_some(e.seq)] {
                    summary { b { "Ran " } code { (command) } " (exit " (exit.map_or("unknown".to_string(), |x| x.to_string())) ")" }
                    @if !fetched { pre { (output) } }
                },
                Said::Output { text } => code { (text) },
                Said::Refused { text } => { b { "Refused by its model service: " } (text) },
                Said::Error { text } => { b { "Error: " } (text) },
                Said::TurnEnded { ok } => { i { "The turn ended" @if !*ok { " in error" } "." } },
                Said::Ended { outcome, note } => { b { "The run ended " (outcome) } ": " (note) },
            }
        }
    }
}

/// Whether the console follows what arrives, and from which receipt:
/// for a viewer signed in who may read (`wait` answers no one else), on
/// a page given Fossil's nonce; the newest receipt and the nonce.
fn live_console<'r>(request: &'r Request, cx: &Context) -> Option<(i64, &'r str)> {
    let nonce = request.nonce.as_deref()?;
    let may_read = request.signed_in() && cx.caller().is_ok_and(|c| c.capabilities.has('o'));
    let last = cx.repo().ok()?.last_receipt().ok()?;
    may_read.then_some((last, nonce))
}

/// The console's script: waits on the page's `wait` for anything received
/// after the console was drawn, then asks for the console again (a GET,
/// never the POST that drew it) and, when its questions or runs (each
/// card and a run's state) are not those shown, puts the new one in
/// place without a reload; while the page says what a press just wrote,
/// or the viewer has begun filling a form, it says something arrived
/// instead, and their words stay. A full server (429) is asked again
/// after 30 s, a failure after 10 s.
const CONSOLE_SCRIPT: &str = r#"(function(){
var c=document.getElementById('ocx-console'),last=Number(c.getAttribute('data-last')),url=c.getAttribute('data-wait'),typed=false;
document.addEventListener('input',function(){typed=true;});
function shown(){return document.querySelector('div.fossil-doc');}
function key(d){return Array.prototype.map.call(d.querySelectorAll('section.ocx-card'),function(e){return e.id+':'+(e.getAttribute('data-state')||'');}).join(',');}
function busy(){var f=document.activeElement;return typed||document.getElementById('ocx-written')||(f&&/^(INPUT|TEXTAREA|SELECT)$/.test(f.tagName));}
function redraw(){return fetch(location.href,{credentials:'same-origin'}).then(function(r){return r.text();}).then(function(t){var n=new DOMParser().parseFromString(t,'text/html').querySelector('div.fossil-doc'),o=shown();if(!n||!o||key(n)===key(o))return;if(busy()){document.getElementById('ocx-arrived').hidden=false;return;}o.replaceWith(n);});}
function next(){fetch(url+'?after='+last+'&within=50',{credentials:'same-origin'}).then(function(r){if(r.status===429){setTimeout(next,30000);return null;}return r.json();}).then(function(a){if(a===null)return;if(a&&a.last>last){last=a.last;return redraw().then(next);}next();}).catch(function(){setTimeout(next,10000);});}
next();})();"#;

/// The run page's script (the page's markup says what it has to do): a
/// fold whose output was not sent (marked `data-fetch` with its entry's
/// number) asks the page's JSON for that entry once opened and shows
/// the output (a failure said in its place, asked again when opened
/// again); a press of `#ocx-earlier`'s button asks the page's JSON for
/// the whole transcript and puts the entries before the first shown in
/// place; on a list marked `data-live`, it asks for the entries after
/// the last shown, waiting up to 20 s each time, and adds each, with
/// the spend and the state, until the run has ended. Every text is set
/// as text, never as HTML.
const RUN_SCRIPT: &str = r#"(function(){
var list=document.getElementById('ocx-transcript'),spend=document.getElementById('ocx-spend'),state=document.getElementById('ocx-state'),earlier=document.getElementById('ocx-earlier');
function el(t,c,x){var e=document.createElement(t);if(c)e.className=c;if(x!==undefined)e.textContent=x;return e;}
function json(q){return fetch(location.pathname+'?json'+q,{credentials:'same-origin'}).then(function(r){return r.json();});}
function fold(head,body){var d=el('details'),s=el('summary',null,head);d.appendChild(s);d.appendChild(el('pre',null,body));return d;}
function item(e){var li=el('li','ocx-'+e.kind);li.appendChild(el('time',null,e.at));li.appendChild(document.createTextNode(' '));
switch(e.kind){case 'delivery':li.appendChild(el('b',null,'Delivered'));li.appendChild(el('blockquote',null,e.text));break;
case 'words':li.appendChild(el('b',null,'Said'));li.appendChild(el('blockquote',null,e.text));break;
case 'tool_call':li.appendChild(el('b',null,'Called '));li.appendChild(el('code',null,e.name));li.appendChild(document.createTextNode(' '));li.appendChild(el('code',null,JSON.stringify(e.arguments)));break;
case 'tool_result':li.appendChild(fold(e.error?'Failed':'Answered',e.output));break;
case 'command':li.appendChild(fold('Ran '+e.command+' (exit '+(e.exit===null||e.exit===undefined?'unknown':e.exit)+')',e.output));break;
case 'output':li.appendChild(el('code',null,e.text));break;
case 'refused':li.appendChild(el('b',null,'Refused by its model service: '));li.appendChild(document.createTextNode(e.text));break;
case 'error':li.appendChild(el('b',null,'Error: '));li.appendChild(document.createTextNode(e.text));break;
case 'turn_ended':li.appendChild(el('i',null,'The turn ended'+(e.ok?'':' in error')+'.'));break;
case 'ended':li.appendChild(el('b',null,'The run ended '+e.outcome));li.appendChild(document.createTextNode(': '+e.note));break;
default:li.appendChild(document.createTextNode(e.kind));}
return li;}
list.addEventListener('toggle',function(ev){
var d=ev.target,n=d.open&&d.getAttribute('data-fetch');if(!n)return;d.removeAttribute('data-fetch');
var pre=d.querySelector('pre')||d.appendChild(el('pre'));pre.textContent='Fetching its output…';
json('&entry='+n).then(function(a){var o=a.result||{},e=(o.transcript||[])[0];
if(!a.ok||!e)throw new Error(a.stopped?a.stopped.reason:(o.transcript_withheld||'no such entry'));
pre.textContent=e.output;}).catch(function(x){pre.textContent='Its output could not be fetched ('+x.message+'): close it and open it again.';d.setAttribute('data-fetch',n);});
},true);
if(earlier)earlier.querySelector('button').addEventListener('click',function(){
var first=Number(list.getAttribute('data-first'));earlier.textContent='Fetching the earlier entries…';
json('').then(function(a){if(!a.ok||!a.result)throw new Error(a.stopped?a.stopped.reason:'no answer');
var at=list.firstChild;(a.result.transcript||[]).forEach(function(e){if(e.seq<first)list.insertBefore(item(e),at);});
list.removeAttribute('data-first');earlier.remove();}).catch(function(x){earlier.textContent='The earlier entries could not be fetched ('+x.message+'): reload the page to try again.';});});
function next(){json('&after='+(list.getAttribute('data-last')||'0')+'&within=20').then(function(a){
if(!a.ok||!a.result){setTimeout(next,5000);return;}var o=a.result;
(o.transcript||[]).forEach(function(e){list.appendChild(item(e));});list.setAttribute('data-last',o.last);
if(o.spent)spend.textContent='Spent: '+o.spent;
if(o.state!=='running'){state.textContent='Ended '+(o.outcome||'')+(o.note?': '+o.note:'');return;}
next();}).catch(function(){setTimeout(next,5000);});}
if(list.hasAttribute('data-live'))next();})();"#;

/// A pattern on the console: what it is, who wrote it, the record
/// `create` would write from it (node, user, runner, objective, what
/// wakes it, sandbox, budget, restrictions), and a button that writes it.
fn pattern_card(request: &Request, p: &Value, dry: &Answer) -> Markup {
    let name = text_of(p, "name");
    let fields = dry.result.as_ref().map(|r| &r["fields"]);
    let json = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    let list = |v: &Value| match v.as_array() {
        Some(a) if a.is_empty() => "none".to_string(),
        Some(a) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        None => String::new(),
    };
    html! {
        section.ocx-card.ocx-pattern id=(format!("pattern-{name}")) {
            h3 { (name) }
            p.ocx-needs { "Written by " b { (text_of(p, "written_by")) } " at " (text_of(p, "written_at")) ", page " code { (text_of(p, "page")) } }
            @match (&dry.stopped, fields) {
                (Some(s), _) => p.ocx-noform { "It would stop: " @if let Some(f) = &s.field { b.ocx-field { (f) } ": " } (s.reason) },
                (None, Some(f)) => {
                    table.ocx-record {
                        tr { th { "objective" } td { (text_of(f, "objective")) } }
                        tr { th { "runner" } td { (text_of(f, "runner")) } }
                        tr { th { "node" } td { code { (text_of(f, "node")) } } }
                        tr { th { "user" } td { (text_of(f, "user")) @if p.get("user").is_none() { " (a new login, named when it is written)" } } }
                        tr { th { "wakes on" } td { "check-ins on: " (list(&f["checkins"])) "; posts of: " (list(&f["hears"])) } }
                        tr { th { "sandbox" } td { code { (json(&f["sandbox"])) } } }
                        tr { th { "budget" } td { code { (json(&f["budget"])) } } }
                        tr { th { "restrict" } td { code { (json(&f["restrict"])) } } }
                    }
                    @if request.signed_in() {
                        form.ocx-form method="post" action=(request.link(Some("create"))) enctype="application/x-www-form-urlencoded" {
                            input type="hidden" name="pattern" value=(name);
                            p { button type="submit" id=(format!("pattern-{name}-create")) { "Create this run" } }
                        }
                    }
                },
                (None, None) => p { "nothing" },
            }
        }
    }
}

fn text_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn console_question(request: &Request, q: &Value) -> Markup {
    let asked = text_of(q, "asked");
    let short = &asked[..10.min(asked.len())];
    let refs: Vec<&Value> = q
        .get("replies_to")
        .into_iter()
        .chain(
            q.get("references")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        )
        .collect();
    let presses = q
        .get("decide")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    html! {
        section.ocx-card.ocx-question id=(format!("question-{short}")) {
            h3 { (text_of(q, "question")) }
            p { "Asked by " b { (text_of(q, "from")) } " at " (text_of(q, "at")) ", "
                a href=(format!("{}{}", request.uri, text_of(q, "link"))) { "where it was asked" } }
            @if let Some(s) = q.get("stakes").and_then(Value::as_str) { p { "What it changes: " (s) } }
            @if let Some(held) = q.get("held").and_then(Value::as_str) {
                details.ocx-held open { summary { "What would be written, exactly" } pre { (held) } }
            }
            @if !refs.is_empty() {
                p { "Read first:" }
                ul { @for r in &refs {
                    li {
                        @if text_of(r, "link").starts_with('/') {
                            a href=(format!("{}{}", request.uri, text_of(r, "link"))) { (text_of(r, "title")) }
                        } @else {
                            (text_of(r, "title"))
                        }
                        @if let Some(e) = r.get("excerpt").and_then(Value::as_str) {
                            details { summary { "excerpt" } blockquote { (e) } }
                        }
                    }
                } }
            }
            @if !presses.is_empty() && request.signed_in() {
                form.ocx-form method="post" action=(request.link(Some("console"))) enctype="application/x-www-form-urlencoded" {
                    input type="hidden" name="question" value=(short);
                    @if q.get("options").and_then(Value::as_array).is_none_or(|o| o.is_empty()) {
                        label for=(format!("note-{short}")) { "Your decision" }
                        input type="text" id=(format!("note-{short}")) name="note";
                        button type="submit" { "Decide" }
                    } @else {
                        label for=(format!("note-{short}")) { "A note (optional)" }
                        input type="text" id=(format!("note-{short}")) name="note";
                        p { @for (i, p) in presses.iter().enumerate() {
                            button type="submit" name="option" value=(i + 1) class="ocx-option" { (text_of(p, "label")) } " "
                        } }
                    }
                }
            }
        }
    }
}

fn console_run(request: &Request, r: &Value) -> Markup {
    let record = text_of(r, "record");
    html! {
        section.ocx-card.ocx-run id=(format!("run-{}", &record[..16.min(record.len())])) data-state=(r.get("outcome").and_then(Value::as_str).unwrap_or("running")) {
            p { b { (text_of(r, "objective")) } }
            p.ocx-links {
                a.ocx-run-page href=(request.link(Some(&format!("run/{record}")))) { "its page" }
                " · "
                a href=(format!("{}/forumpost/{record}", request.uri)) { "its thread" }
                " · record "
                a.ocx-hash href=(format!("{}/info/{record}", request.uri)) { (&record[..10.min(record.len())]) }
            }
            p { (text_of(r, "runner")) " as " (text_of(r, "runs_as")) ", sent by " (text_of(r, "sent_by")) ", since " (text_of(r, "since")) }
            @if let Some(w) = r.get("wall_left").and_then(Value::as_i64) { p { "Wall left: " (w) " s" } }
            @if let Some(n) = r.get("next_slot").and_then(Value::as_str) { p { "Next slot of its schedule: " (n) } }
            @if let Some(l) = r.get("last_said").and_then(Value::as_str) { p { "Last said: " (l) } }
            @if let Some(c) = r.get("cost").and_then(Value::as_str) { p.ocx-cost { "Cost: " (c) } }
            @if let Some(a) = r.get("attach").and_then(Value::as_str) {
                p.ocx-attach { "Its terminal may be attached, on the node's host as its account: " code { (a) } }
            }
            @if let Some(o) = r.get("outcome").and_then(Value::as_str) {
                p { "Ended " b { (o) } @if let Some(n) = r.get("note").and_then(Value::as_str) { ": " (n) } }
            }
        }
    }
}

/// The button back to the list of tools.
fn back(request: &Request) -> Markup {
    html! { p { a.ocx-button href=(request.link(Some(super::TOOL_LIST))) { (PreEscaped("&larr;")) " All tools" } } }
}

/// A tool's page begins: a button back to the list, the bar, the viewer.
fn tool_page_head(request: &Request, cx: &Context) -> Markup {
    html! {
        (back(request))
        (bar(request))
        (who(request, cx))
    }
}

/// The bar linking each tool.
fn bar(request: &Request) -> Markup {
    html! {
        nav.ocx-bar {
            a href=(request.link(None)) { "OCX" }
            " " a href=(request.link(Some("console"))) { b { "console" } }
            @for group in registry::GROUPS {
                @let tools = grouped(group);
                @if !tools.is_empty() {
                    br;
                    span.ocx-group-name { a href=(format!("{}#{}", request.link(None), group_id(group))) { (group.title) ":" } }
                    @for tool in tools {
                        " " a href=(request.link(Some(tool.name()))) { (tool.name()) }
                    }
                }
            }
        }
    }
}

/// The tools of `group` the page offers, in the group's order.
fn grouped(group: &registry::Group) -> Vec<&'static dyn Entry> {
    group
        .tools
        .iter()
        .filter_map(|n| registry::find(n))
        .filter(|t| offered(*t))
        .collect()
}

/// The anchor of `group`'s section on the tools page.
fn group_id(group: &registry::Group) -> String {
    group.title.to_lowercase().replace(' ', "-")
}

/// Which release of OCX serves the page: the one current as `ocx-cgi`, or
/// the one staged as next as `ocx-cgi-next`, by its check-in.
fn release(request: &Request) -> Markup {
    html! {
        p.ocx-release {
            "Served as " code { (request.served_as()) }
            @match &request.release {
                Some(b) => {
                    " by the release built from check-in " code { (b.checkin.get(..10).unwrap_or(&b.checkin)) }
                    " at " (b.built) " UTC"
                    @if request.next { ", staged as next beside the current one" }
                    "."
                }
                None => ", by a program outside any release root.",
            }
        }
    }
}

/// Who the viewer is, as the page proved and as the repository grants.
fn who(request: &Request, cx: &Context) -> Markup {
    let shown = html! {
        @if let Some(c) = request.capabilities.as_deref() {
            " (Fossil shows capabilities " (c) ")"
        }
    };
    let held = html! {
        @match cx.caller() {
            Ok(c) if c.capabilities.as_str().is_empty() => "; the repository grants you nothing here",
            Ok(c) => {
                @let acts = crate::tool::what_may_be_done(|l| c.capabilities.has(l));
                @if acts.is_empty() {
                    "; OCX gives you nothing to do here"
                } @else {
                    "; you may " (acts.join(", "))
                }
                " (capabilities " code { (c.capabilities.as_str()) } ")"
            }
            Err(stop) => { "; " (stop.reason) }
        }
    };
    html! {
        p.ocx-who {
            @match request.user.as_deref() {
                Some(u) => { "Signed in as " b { (u) } (shown) (held) "." }
                None => { "Nobody is signed in" (shown) (held) "; sign in to change anything." }
            }
        }
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
) -> Markup {
    let name = tool.name();
    let caller = cx.caller();
    let lacks = lacks_capability(tool, cx);
    let mut refused = if tool.writes() && !request.signed_in() {
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
    let would = (now && tool.writes() && !needs_input && refused.is_none()).then(|| {
        let answer = registry::call(name, Ok(Value::Object(Map::new())), cx, true);
        let nothing_to_fill = fields.iter().all(|f| f.path[0] == "dry_run");
        if let (Some(s), true) = (&answer.stopped, nothing_to_fill) {
            refused = Some(format!(
                "it has nothing to fill in, and it would stop: {}",
                s.reason
            ));
        }
        answer
    });
    html! {
        section.ocx-card id=(format!("tool-{name}")) {
            h3 { a href=(request.link(Some(name))) { (name) } }
            p { (tool.summary()) }
            p.ocx-needs {
                "Needs: "
                @match tool.needs().letters() {
                    None => "nothing: anyone may use it",
                    Some(letters) => {
                        "the right to "
                        @for (i, l) in letters.chars().enumerate() {
                            @let held = caller.as_ref().is_ok_and(|c| c.capabilities.has(l));
                            @let words = crate::tool::capability_words(l);
                            @if i > 0 { ", or " }
                            @if held {
                                span.ocx-held title=(format!("you hold {l}")) { (words) " (" (l) ", yours)" }
                            } @else {
                                span.ocx-not-held title=(format!("you do not hold {l}")) { (words) " (" (l) ")" }
                            }
                        }
                    },
                }
                @if let Needs::AnyOrRun(_, allowed) = tool.needs() {
                    ", or a run whose record allows " (allowed)
                }
                ". "
                @if tool.writes() { "It may change the repository." } @else { "It only reads." }
            }
            @if let Some(answer) = &would {
                div.ocx-now {
                    p { "What it would do now:" }
                    @if let Some(s) = &answer.stopped {
                        p { "it would stop: " (s.reason) }
                    } @else if answer.log.is_empty() {
                        p { "nothing" }
                    } @else {
                        ul { @for op in &answer.log { li { (op.to_string()) } } }
                    }
                }
            }
            @match &refused {
                Some(why) => p.ocx-noform { "No form: " (why) "." },
                None => (form(request, tool, fields, given)),
            }
        }
    }
}

/// A tool's form: a POST to its own page, a field for each of its
/// input's, filled in from `given` (what the request gave) when there is
/// one, each described once, beneath it (a field's description is most of
/// the page's bytes, which Fossil reads through once more to put it in its
/// skin).
fn form(request: &Request, tool: &dyn Entry, fields: &[Flag], given: Option<&Value>) -> Markup {
    let name = tool.name();
    html! {
        form.ocx-form method="post" action=(request.link(Some(name))) enctype="application/x-www-form-urlencoded" {
            @for f in fields {
                @let field = &f.path[0];
                @let id = format!("{name}-{field}");
                @let value = given.and_then(|g| g.get(field));
                @let text = value.map(field_text).unwrap_or_default();
                @let required = if f.required { " (required)" } else { "" };
                @let doc = format!("{id}-doc");
                @match f.kind {
                    Kind::Boolean => label {
                        input type="checkbox" id=(id) name=(field) aria-describedby=(doc) value="true" checked[value == Some(&Value::Bool(true))];
                        " " (field)
                    },
                    Kind::Integer => {
                        label for=(id) { (field) (required) }
                        input type="number" step="1" id=(id) name=(field) aria-describedby=(doc) value=(text);
                    },
                    Kind::Json => {
                        label for=(id) { (field) (required) " (JSON)" }
                        textarea rows="3" id=(id) name=(field) aria-describedby=(doc) { (text) }
                    },
                    Kind::List => {
                        label for=(id) { (field) (required) " (separated by spaces)" }
                        input type="text" id=(id) name=(field) aria-describedby=(doc) value=(text);
                    },
                    Kind::Text if f.doc.contains("Markdown") => {
                        label for=(id) { (field) (required) }
                        textarea rows="5" id=(id) name=(field) aria-describedby=(doc) { (text) }
                    },
                    Kind::Text => {
                        label for=(id) { (field) (required) }
                        input type="text" id=(id) name=(field) aria-describedby=(doc) value=(text);
                    },
                }
                small id=(doc) { (f.doc) }
            }
            p { button type="submit" id=(format!("{name}-submit")) { "Run " (name) } }
        }
    }
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

/// `text` with each full artifact hash in it (40 or 64 hex digits standing
/// alone) a link to Fossil's own page of that artifact under `uri`, the
/// rest escaped.
fn with_hashes_linked(uri: &str, text: &str) -> Markup {
    let mut parts: Vec<(bool, &str)> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_hexdigit()) {
        let run = rest[start..]
            .find(|c: char| !c.is_ascii_hexdigit())
            .map_or(rest.len(), |n| start + n);
        let word = &rest[start..run];
        let alone = !rest[..start].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            && !rest[run..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        if alone && matches!(word.len(), 40 | 64) {
            parts.push((false, &rest[..start]));
            parts.push((true, word));
        } else {
            parts.push((false, &rest[..run]));
        }
        rest = &rest[run..];
    }
    parts.push((false, rest));
    html! {
        @for (hash, part) in parts {
            @if hash {
                a.ocx-hash href=(format!("{uri}/info/{part}")) { (part) }
            } @else {
                (part)
            }
        }
    }
}

/// An answer on the page: the result (or why it stopped) before the log,
/// each full hash in the result a link to its artifact's page under `uri`.
fn render_answer(uri: &str, answer: &Answer, text: Option<String>) -> Markup {
    html! {
        @match &answer.stopped {
            Some(s) => div class="ocx-answer ocx-stopped" {
                @match &s.field {
                    Some(f) => p { "Stopped: " b.ocx-field { (f) } ": " (s.reason) },
                    None => p { "Stopped: " (s.reason) },
                }
                @if let Some(n) = &answer.next_step {
                    p { "Next: " (n) }
                }
                (answer_tail(answer))
            },
            None => div class="ocx-answer ocx-ok" {
                pre.ocx-result { (with_hashes_linked(uri, text.as_deref().unwrap_or(""))) }
                (answer_tail(answer))
            },
        }
    }
}

/// The end of an answer: whether it was a dry run, and its log.
fn answer_tail(answer: &Answer) -> Markup {
    html! {
        @if answer.dry_run {
            p.ocx-dry { "Dry run: nothing was written." }
        }
        @if !answer.log.is_empty() {
            p { "Log:" }
            ul.ocx-log { @for op in &answer.log { li { (op.to_string()) } } }
        }
    }
}

/// A whole page: Fossil wraps a `text/html` body whose first element is a
/// `fossil-doc` div in the site's skin, titled by its `data-title`.
fn page(title: &str, inner: Markup) -> String {
    html! {
        div.fossil-doc data-title=(title) {
            style { (PreEscaped(STYLE)) }
            (inner)
        }
    }
    .into_string()
}

/// The page's style: layout only, every colour the skin's own.
const STYLE: &str = "
.ocx-bar { margin: 0.5em 0; }
.ocx-bar a { margin-right: 0.8em; }
.ocx-group-name { margin-right: 0.8em; font-weight: bold; }
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
.ocx-result, .ocx-transcript pre { white-space: pre-wrap; }
.ocx-notice, .ocx-noform, .ocx-dry { font-style: italic; }
.ocx-button { display: inline-block; border: 1px solid currentColor; border-radius: 4px; padding: 0.1em 0.6em; text-decoration: none; color: inherit; }
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::{Op, Stopped};

    #[test]
    fn full_hashes_standing_alone_link_to_their_artifacts_and_nothing_else_does() {
        let h40 = "a".repeat(40);
        let h64 = "0123456789abcdef".repeat(4);
        let text = format!(
            "record {h64}\nparent {h40}.\nshort abcdef0123 long {h64}0 word x{h40} <b>{h40}</b>"
        );
        let html = with_hashes_linked("/r", &text).into_string();
        assert_eq!(html.matches("<a class=\"ocx-hash\"").count(), 3, "{html}");
        assert!(html.contains(&format!("href=\"/r/info/{h64}\">{h64}</a>")));
        assert!(html.contains(&format!("href=\"/r/info/{h40}\">{h40}</a>.")));
        assert!(html.contains(&format!(
            "&lt;b&gt;<a class=\"ocx-hash\" href=\"/r/info/{h40}\">"
        )));
        assert!(!html.contains("<b>"), "{html}");
    }

    #[test]
    fn an_answer_escapes_every_text_it_shows() {
        let hostile = "<script>x</script>\"&";
        let answer = Answer {
            ok: false,
            tool: "post".into(),
            dry_run: true,
            log: vec![Op::Read {
                what: hostile.into(),
            }],
            result: None,
            stopped: Some(Stopped {
                kind: crate::stop::StopKind::Refused,
                field: Some(hostile.into()),
                reason: hostile.into(),
            }),
            next_step: Some(hostile.into()),
            took_ms: 0,
        };
        let html = page(hostile, render_answer("/r", &answer, Some(hostile.into())));
        assert!(!html.contains("<script"), "{html}");
        assert!(
            html.contains("&lt;script&gt;x&lt;/script&gt;&quot;&amp;"),
            "{html}"
        );
        assert!(html.starts_with("<div class=\"fossil-doc\" data-title=\"&lt;script"));
    }
}
