//! Splitting an input stream into documents and parsing each one, keeping
//! the document number and the line it starts on for error messages.

use serde_json::Value;

use super::InjectError;
use super::locate::KeyLines;

/// One parsed document.
#[derive(Debug, Clone)]
pub struct Document {
    /// 1-based number in the stream.
    pub number: usize,
    /// 1-based line of the input where the document's text starts.
    pub first_line: usize,
    /// The document's own text (for locating keys in error messages).
    pub text: String,
    /// The parsed value.
    pub value: Value,
}

/// Parse a YAML stream (documents separated by `---`) or a JSON stream
/// (one or more concatenated JSON values). Empty YAML documents are dropped.
pub fn parse_stream(input: &str) -> Result<Vec<Document>, InjectError> {
    let trimmed = input.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        parse_json(input)
    } else {
        parse_yaml(input)
    }
}

fn parse_json(input: &str) -> Result<Vec<Document>, InjectError> {
    let mut docs = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(input).into_iter::<Value>();
    let mut number = 0;
    loop {
        let offset = stream.byte_offset();
        let next = stream.next();
        let Some(next) = next else { break };
        number += 1;
        match next {
            Ok(value) => {
                let start = offset
                    + input
                        .get(offset..)
                        .map_or(0, |rest| rest.len() - rest.trim_start().len());
                let end = stream.byte_offset();
                let text = input.get(start..end).unwrap_or_default().to_owned();
                docs.push(Document {
                    number,
                    first_line: line_of_offset(input, start),
                    text,
                    value,
                });
            }
            Err(e) => {
                return Err(InjectError::Parse {
                    document: number,
                    line: e.line(),
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(docs)
}

fn line_of_offset(input: &str, offset: usize) -> usize {
    input
        .get(..offset)
        .map_or(1, |before| before.matches('\n').count() + 1)
}

/// A document separator line: `---` alone or followed by whitespace or a
/// comment, or the document end marker `...`.
fn separator(line: &str) -> Option<&str> {
    for marker in ["---", "..."] {
        if let Some(rest) = line.strip_prefix(marker)
            && (rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
        {
            return Some(if marker == "---" { rest } else { "" });
        }
    }
    None
}

fn parse_yaml(input: &str) -> Result<Vec<Document>, InjectError> {
    // (first line number, text)
    let mut chunks: Vec<(usize, String)> = vec![(1, String::new())];
    for (index, line) in input.split_inclusive('\n').enumerate() {
        let line_no = index + 1;
        match separator(line) {
            Some(rest) => {
                // Content after `--- ` on the same line belongs to the new
                // document; pad to keep its column.
                let mut text = String::new();
                let mut first = line_no + 1;
                if !rest.trim().is_empty() && !rest.trim_start().starts_with('#') {
                    text.push_str("   ");
                    text.push_str(rest);
                    first = line_no;
                }
                chunks.push((first, text));
            }
            None => {
                if let Some((_, text)) = chunks.last_mut() {
                    text.push_str(line);
                }
            }
        }
    }
    let mut docs = Vec::new();
    let mut number = 0;
    for (first_line, text) in chunks {
        let meaningful = text
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if !meaningful {
            continue;
        }
        number += 1;
        match serde_saphyr::from_str::<Value>(&text) {
            Ok(Value::Null) => {}
            Ok(value) => docs.push(Document {
                number,
                first_line,
                text,
                value,
            }),
            Err(e) => {
                let relative = e.location().map_or(1, |l| l.line() as usize).max(1);
                let message = e.without_snippet().to_string();
                return Err(InjectError::Parse {
                    document: number,
                    line: first_line + relative - 1,
                    message: first_line_of(&message),
                });
            }
        }
    }
    Ok(docs)
}

/// The first line of a parser message, without its own (document-relative)
/// `at line N, column M` suffix.
fn first_line_of(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message).trim();
    match first.rfind(" at line ") {
        Some(cut) => first[..cut].to_owned(),
        None => first.to_owned(),
    }
}

/// Line (1-based, in the whole input) of the key at `path` inside `doc`
/// (`[i]` segments index sequences), or of its deepest ancestor present;
/// the document's first line when none is.
///
/// Locations come from the YAML parser (serde-saphyr spans, which also
/// covers JSON). Should the parser give none for this text, each key of the
/// path is searched for in the text in turn, after the line where the
/// previous one was found (best effort).
pub fn locate_path(doc: &Document, path: &[String]) -> usize {
    if let Some(lines) = KeyLines::parse(&doc.text) {
        return lines
            .line_of(path)
            .and_then(|line| usize::try_from(line).ok())
            .map_or(doc.first_line, |line| doc.first_line + line.max(1) - 1);
    }
    let lines: Vec<&str> = doc.text.lines().collect();
    let mut at = 0;
    for key in path.iter().filter(|k| !k.starts_with('[')) {
        let found = lines.iter().enumerate().skip(at).find(|(_, line)| {
            let mut t = line.trim_start();
            while let Some(rest) = t.strip_prefix("- ") {
                t = rest.trim_start();
            }
            [
                format!("{key}:"),
                format!("\"{key}\":"),
                format!("'{key}':"),
            ]
            .iter()
            .any(|p| t.starts_with(p.as_str()) || t.contains(&format!("{{{p}")))
                || t.contains(&format!("\"{key}\":"))
        });
        if let Some((index, _)) = found {
            at = index;
        }
    }
    doc.first_line + at
}
