//! Ollama's `/api/chat` over HTTP (ureq, blocking): one request posted,
//! nothing streamed, no timeout of its own (the run's wall is its clock),
//! and the reply read as a chat reply or refused saying why.

use serde_json::{Map, Value};

/// What goes wrong posting a request.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// No answer at all: the connection failed or broke.
    #[error("{0}")]
    Unreachable(String),
    /// The reply's body is longer than the room left for it.
    #[error("the reply is longer than the {0} bytes left")]
    TooLong(u64),
}

/// Why a reply is not Ollama's chat reply, naming what in it is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotChat {
    /// Not an object at all.
    #[error("the body is not a JSON object")]
    NotObject,
    /// Ollama's own error, its first line.
    #[error("it holds an error: {0}")]
    Said(String),
    /// No `message` object.
    #[error("it holds no message object")]
    NoMessage,
    /// A `message.role` other than the assistant's.
    #[error("message.role is {0:?}, not \"assistant\"")]
    Role(String),
    /// No `message.role`.
    #[error("message.role is missing")]
    NoRole,
    /// A `message.content` that is no string.
    #[error("message.content is not a string")]
    Content,
    /// A `message.tool_calls` that is no list.
    #[error("message.tool_calls is not a list")]
    Calls,
    /// A call without its function.
    #[error("message.tool_calls[{0}] holds no function object")]
    Function(usize),
    /// A call's function without a name.
    #[error("message.tool_calls[{0}].function.name is not a string")]
    Name(usize),
}

/// Ollama's chat endpoint and the HTTP agent that reaches it.
pub struct Client {
    agent: ureq::Agent,
    endpoint: String,
}

impl Client {
    /// A client posting to `endpoint` (`…/api/chat`): a status other than
    /// 2xx is read like any answer, no redirect is followed and no
    /// timeout is set.
    pub fn new(endpoint: String) -> Client {
        Client {
            agent: crate::http::agent(None),
            endpoint,
        }
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Posts `body` (JSON) and reads the status and at most `limit` bytes
    /// of the reply's body.
    pub fn post(&self, body: &[u8], limit: u64) -> Result<(u16, Vec<u8>), ChatError> {
        let mut reply = self
            .agent
            .post(&self.endpoint)
            .header("Content-Type", "application/json")
            .send(body)
            .map_err(|e| ChatError::Unreachable(e.to_string()))?;
        let status = reply.status().as_u16();
        let read = reply.body_mut().with_config().limit(limit).read_to_vec();
        match read {
            Ok(bytes) => Ok((status, bytes)),
            Err(ureq::Error::BodyExceedsLimit(_)) => Err(ChatError::TooLong(limit)),
            Err(e) => Err(ChatError::Unreachable(e.to_string())),
        }
    }
}

/// A tool call the model made, as Ollama gives it in `tool_calls`.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeCall {
    /// The function's name.
    pub name: String,
    /// Its arguments: an object, or (from a server that sends them as
    /// text) a string, read as one when it holds an object.
    pub arguments: Value,
}

/// A chat reply: the assistant's message as received, its words, its
/// calls and the prompt's token count when given.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The message as received, kept in the conversation as it is.
    pub message: Value,
    /// `message.content` (empty when absent).
    pub content: String,
    /// `message.tool_calls`, in order.
    pub calls: Vec<NativeCall>,
    /// `prompt_eval_count`, when a whole number.
    pub prompt_eval_count: Option<u64>,
}

/// Reads `reply` as Ollama's chat reply: an object whose `message` is an
/// object with `role` "assistant", `content` a string when given, and
/// `tool_calls` (when given) a list of `{function: {name, arguments}}`;
/// anything else is refused saying what is wrong. Total: any value gets a
/// reading or a reason.
pub fn read_reply(reply: &Value) -> Result<Reply, NotChat> {
    let top = reply.as_object().ok_or(NotChat::NotObject)?;
    if let Some(error) = top.get("error") {
        return Err(NotChat::Said(one_line(&text_of(error))));
    }
    let message = top
        .get("message")
        .and_then(Value::as_object)
        .ok_or(NotChat::NoMessage)?;
    match message.get("role").and_then(Value::as_str) {
        Some("assistant") => {}
        Some(other) => return Err(NotChat::Role(other.to_string())),
        None => return Err(NotChat::NoRole),
    }
    let content = match message.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(NotChat::Content),
    };
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| native_call(i, item))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(NotChat::Calls),
    };
    let prompt_eval_count = top.get("prompt_eval_count").and_then(Value::as_u64);
    Ok(Reply {
        message: Value::Object(message.clone()),
        content,
        calls,
        prompt_eval_count,
    })
}

/// The `i`th of `message.tool_calls`.
fn native_call(i: usize, item: &Value) -> Result<NativeCall, NotChat> {
    let function = item
        .get("function")
        .and_then(Value::as_object)
        .ok_or(NotChat::Function(i))?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or(NotChat::Name(i))?;
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v) => v.clone(),
    };
    Ok(NativeCall {
        name: name.to_string(),
        arguments,
    })
}

/// A value as text: a string as it is, anything else as JSON.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The first line of `text`, at most 300 characters, without control
/// characters: what a one-line error may quote of a body.
pub fn one_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(300)
        .collect()
}

/// What an error reply said: its `error` field when it is JSON holding
/// one, else its first line.
pub fn said(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match serde_json::from_str::<Value>(&text) {
        Ok(v) => match v.get("error") {
            Some(e) => one_line(&text_of(e)),
            None => one_line(&text),
        },
        Err(_) => one_line(&text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_chat_reply_reads_with_its_calls() {
        let r = read_reply(&json!({"model": "m", "message": {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"index": 0, "name": "ocx_read", "arguments": {"path": "a"}}}]},
            "done": true, "prompt_eval_count": 120}))
        .unwrap();
        assert_eq!(r.calls[0].name, "ocx_read");
        assert_eq!(r.calls[0].arguments, json!({"path": "a"}));
        assert_eq!(r.prompt_eval_count, Some(120));
    }

    #[test]
    fn anything_else_is_refused_saying_why() {
        for (v, why) in [
            (json!([]), "not a JSON object"),
            (json!({"error": "model not found"}), "model not found"),
            (json!({"message": "hi"}), "no message object"),
            (json!({"message": {"role": "user"}}), "message.role"),
            (
                json!({"message": {"role": "assistant", "content": 3}}),
                "message.content",
            ),
            (
                json!({"message": {"role": "assistant", "tool_calls": [{"function": {}}]}}),
                "tool_calls[0].function.name",
            ),
        ] {
            let e = read_reply(&v).unwrap_err();
            assert!(e.to_string().contains(why), "{v}: {e}");
        }
    }
}
