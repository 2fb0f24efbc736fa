//! Parsers: where the answer sits in a completion.
//!
//! Every parser first drops reasoning (`<think>...</think>`) and then applies its rule to the
//! last assistant message. Written in configs as a string: `raw`, `boxed`, `xml:<field>`,
//! `marker:<text>` or `code`.

use std::fmt;
use std::str::FromStr;

use temper_protocol::{Message, Role};
use temper_verify::extract;

/// A rule for extracting the answer from a completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parser {
    /// The whole text (after think stripping), trimmed.
    Raw,
    /// The content of the last `\boxed{...}`.
    Boxed,
    /// The content of the last `<field>...</field>`.
    Xml(String),
    /// The rest of the line after the last occurrence of a marker, such as `Answer:`.
    Marker(String),
    /// The body of the last fenced code block.
    Code,
}

impl Parser {
    /// The answer in `text`, if the text has one in this parser's format.
    pub fn parse(&self, text: &str) -> Option<String> {
        let text = extract::strip_think(text);
        let text = text.as_ref();
        let found = match self {
            Self::Raw => Some(text.trim()),
            Self::Boxed => extract::last_boxed(text),
            Self::Xml(field) => extract::xml_field(text, field),
            Self::Marker(marker) => extract::after_marker(text, marker),
            Self::Code => extract::last_code_block(text),
        };
        found.map(str::to_owned)
    }

    /// The answer in the last assistant message of a completion.
    pub fn parse_answer(&self, completion: &[Message]) -> Option<String> {
        last_assistant(completion).and_then(|m| self.parse(&m.content))
    }

    /// Whether `text` follows the format strictly: the XML element is closed, the code fence is
    /// closed, the box or marker is present; raw text must not be empty.
    pub fn follows_format(&self, text: &str) -> bool {
        let text = extract::strip_think(text);
        let text = text.as_ref();
        match self {
            Self::Raw => !text.trim().is_empty(),
            Self::Xml(field) => {
                let (open, close) = (format!("<{field}>"), format!("</{field}>"));
                text.find(&open).is_some_and(|start| text[start..].contains(&close))
            }
            Self::Code => text.matches("```").count() >= 2,
            Self::Boxed | Self::Marker(_) => self.parse(text).is_some(),
        }
    }
}

/// The last message the model wrote.
pub fn last_assistant(completion: &[Message]) -> Option<&Message> {
    completion.iter().rev().find(|m| m.role == Role::Assistant)
}

impl FromStr for Parser {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let nonempty = |rest: &str, what: &str| {
            if rest.is_empty() {
                Err(format!("`{s}` needs a {what} after the colon"))
            } else {
                Ok(rest.to_owned())
            }
        };
        match s.split_once(':') {
            None => match s {
                "raw" => Ok(Self::Raw),
                "boxed" => Ok(Self::Boxed),
                "code" => Ok(Self::Code),
                _ => Err(format!(
                    "unknown parser `{s}`: expected raw, boxed, code, xml:<field> or marker:<text>"
                )),
            },
            Some(("xml", field)) => {
                if field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                    nonempty(field, "field name").map(Self::Xml)
                } else {
                    Err(format!("xml field `{field}` may hold only letters, digits, `_` and `-`"))
                }
            }
            Some(("marker", marker)) => nonempty(marker, "marker").map(Self::Marker),
            Some((kind, _)) => Err(format!("unknown parser kind `{kind}`: expected xml or marker")),
        }
    }
}

impl fmt::Display for Parser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Raw => f.write_str("raw"),
            Self::Boxed => f.write_str("boxed"),
            Self::Xml(field) => write!(f, "xml:{field}"),
            Self::Marker(marker) => write!(f, "marker:{marker}"),
            Self::Code => f.write_str("code"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_table() {
        let xml: Parser = "xml:answer".parse().expect("parser");
        let cases = [
            (&xml, "<think><answer>no</answer></think><answer> yes </answer>", Some("yes"), true),
            (&xml, "<answer>unclosed", Some("unclosed"), false),
            (&Parser::Boxed, "so \\boxed{\\{1\\}}", Some("\\{1\\}"), true),
            (&Parser::Raw, "  hi ", Some("hi"), true),
            (&Parser::Raw, "<think>only thinking", Some(""), false),
            (&Parser::Code, "```py\nx=1\n```", Some("x=1\n"), true),
        ];
        for (parser, text, want, format) in cases {
            assert_eq!(parser.parse(text).as_deref(), want, "{parser} {text:?}");
            assert_eq!(parser.follows_format(text), format, "{parser} {text:?}");
        }
    }

    #[test]
    fn from_str_round_trips_and_rejects() {
        for s in ["raw", "boxed", "code", "xml:reversed_text", "marker:Answer:"] {
            assert_eq!(s.parse::<Parser>().expect(s).to_string(), s);
        }
        for s in ["json", "xml:", "xml:a b", "yaml:x"] {
            assert!(s.parse::<Parser>().is_err(), "{s}");
        }
    }
}
