//! An offline document collection for research environments, and its two tools: `search`
//! (BM25 full-text ranking with tantivy, top-k titles and snippets) and `open` (a document by
//! id, in pages).
//!
//! A package names the corpus and the tools:
//!
//! ```toml
//! [env]
//! kind = "tool"
//! tools = ["search", "open"]
//! corpus = "data/corpus.jsonl"   # one {"id", "title", "text"} object per line
//! ```
//!
//! The index is built in memory when the environment loads (600 short documents take a few
//! milliseconds) and shared by every rollout; nothing reaches the network.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{Field, STORED, Schema, TEXT, Value as _};
use tantivy::snippet::SnippetGenerator;
use tantivy::{Index, IndexReader, IndexWriter, TantivyDocument, doc};
use temper_protocol::ToolSpec;

use crate::tools::{Tool, ToolContext};

/// Most documents a corpus may hold.
pub const MAX_DOCUMENTS: usize = 1_000_000;
/// Largest corpus file.
pub const MAX_CORPUS_BYTES: u64 = 512 << 20;
/// Characters of a document `open` shows per page.
pub const PAGE_CHARS: usize = 4000;
/// Most results one search returns.
pub const MAX_K: usize = 20;
const MAX_QUERY_CHARS: usize = 1000;
const SNIPPET_CHARS: usize = 240;

/// One document.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// Its id, unique in the corpus.
    pub id: String,
    /// Its title.
    #[serde(default)]
    pub title: String,
    /// Its text.
    pub text: String,
}

/// One search result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Document id.
    pub id: String,
    /// Document title.
    pub title: String,
    /// The passage that best matches the query.
    pub snippet: String,
    /// BM25 score.
    pub score: f32,
}

/// A document collection with its full-text index.
pub struct Corpus {
    docs: Vec<Document>,
    by_id: HashMap<String, usize>,
    index: Index,
    reader: IndexReader,
    row: Field,
    title: Field,
    text: Field,
}

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Corpus({} documents)", self.docs.len())
    }
}

impl Corpus {
    /// Reads a JSONL file of documents and indexes it; errors name the line.
    pub fn load(path: &Path) -> Result<Self, String> {
        let size = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
        if size > MAX_CORPUS_BYTES {
            return Err(format!("{}: {size} bytes, over {MAX_CORPUS_BYTES}", path.display()));
        }
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut docs = Vec::new();
        for (i, line) in BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
            if line.trim().is_empty() {
                continue;
            }
            let doc: Document = serde_json::from_str(&line)
                .map_err(|e| format!("{}:{}: not a document ({e})", path.display(), i + 1))?;
            if doc.id.is_empty() || doc.id.len() > 128 {
                return Err(format!("{}:{}: `id` must be 1 to 128 bytes", path.display(), i + 1));
            }
            docs.push(doc);
            if docs.len() > MAX_DOCUMENTS {
                return Err(format!("{}: more than {MAX_DOCUMENTS} documents", path.display()));
            }
        }
        Self::new(docs).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Indexes `docs` (ids must be unique).
    pub fn new(docs: Vec<Document>) -> Result<Self, String> {
        if docs.is_empty() {
            return Err("the corpus has no documents".into());
        }
        let mut by_id = HashMap::with_capacity(docs.len());
        for (i, d) in docs.iter().enumerate() {
            if by_id.insert(d.id.clone(), i).is_some() {
                return Err(format!("document id `{}` appears twice", d.id));
            }
        }
        let mut schema = Schema::builder();
        let row = schema.add_u64_field("row", STORED);
        let title = schema.add_text_field("title", TEXT);
        let text = schema.add_text_field("text", TEXT);
        let index = Index::create_in_ram(schema.build());
        let fail = |e: tantivy::TantivyError| format!("indexing the corpus: {e}");
        let mut writer: IndexWriter = index.writer_with_num_threads(1, 32 << 20).map_err(fail)?;
        for (i, d) in docs.iter().enumerate() {
            writer
                .add_document(
                    doc!(row => i as u64, title => d.title.as_str(), text => d.text.as_str()),
                )
                .map_err(fail)?;
        }
        writer.commit().map_err(fail)?;
        let reader = index.reader().map_err(fail)?;
        Ok(Self { docs, by_id, index, reader, row, title, text })
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether it holds no documents (never, once built).
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The `k` documents that best match the words of `query` (BM25, titles counting double),
    /// best first.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Hit>, String> {
        if query.trim().is_empty() {
            return Err("the query is empty".into());
        }
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(format!("the query is over {MAX_QUERY_CHARS} characters"));
        }
        let mut parser = QueryParser::for_index(&self.index, vec![self.title, self.text]);
        parser.set_field_boost(self.title, 2.0);
        // A model's query is a bag of words: punctuation and query syntax (quotes, colons,
        // AND/OR) are read as plain text, never as an error.
        let words: String = query
            .chars()
            .map(|c| if c.is_alphanumeric() { c.to_ascii_lowercase() } else { ' ' })
            .collect();
        let (query, _) = parser.parse_query_lenient(&words);
        let searcher = self.reader.searcher();
        let fail = |e: tantivy::TantivyError| format!("search failed: {e}");
        let top = searcher.search(&query, &TopDocs::with_limit(k.clamp(1, MAX_K))).map_err(fail)?;
        let mut snippets = SnippetGenerator::create(&searcher, &*query, self.text).map_err(fail)?;
        snippets.set_max_num_chars(SNIPPET_CHARS);
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let stored: TantivyDocument = searcher.doc(address).map_err(fail)?;
            let row = stored.get_first(self.row).and_then(|v| v.as_u64()).unwrap_or_default();
            let doc = &self.docs[row as usize];
            let snippet = snippets.snippet(&doc.text);
            let fragment = snippet.fragment().trim();
            let snippet = if fragment.is_empty() {
                doc.text.chars().take(SNIPPET_CHARS).collect()
            } else {
                fragment.to_owned()
            };
            hits.push(Hit { id: doc.id.clone(), title: doc.title.clone(), snippet, score });
        }
        Ok(hits)
    }

    /// Page `page` (from 1) of document `id`, and the number of pages.
    pub fn open(&self, id: &str, page: usize) -> Result<(&Document, String, usize), String> {
        let doc = self
            .by_id
            .get(id)
            .map(|&i| &self.docs[i])
            .ok_or_else(|| format!("no document has the id `{id}`"))?;
        let chars: Vec<char> = doc.text.chars().collect();
        let pages = chars.len().div_ceil(PAGE_CHARS).max(1);
        if page == 0 || page > pages {
            return Err(format!("`{id}` has {pages} page(s); there is no page {page}"));
        }
        let start = (page - 1) * PAGE_CHARS;
        let text: String = chars[start..(start + PAGE_CHARS).min(chars.len())].iter().collect();
        Ok((doc, text, pages))
    }
}

/// The `search` tool over a corpus.
#[derive(Debug, Clone)]
pub struct SearchTool(pub Arc<Corpus>);

/// The `open` tool over a corpus.
#[derive(Debug, Clone)]
pub struct OpenTool(pub Arc<Corpus>);

/// Names of the corpus tools.
pub const CORPUS_TOOLS: &[&str] = &["search", "open"];

/// A corpus tool by name.
pub fn corpus_tool(name: &str, corpus: &Arc<Corpus>) -> Option<Arc<dyn Tool>> {
    match name {
        "search" => Some(Arc::new(SearchTool(corpus.clone()))),
        "open" => Some(Arc::new(OpenTool(corpus.clone()))),
        _ => None,
    }
}

#[async_trait]
impl Tool for SearchTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "search",
            "Search the document collection. Returns the best matching documents' ids, titles \
             and a matching passage.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for; names work best."},
                    "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "description": "How many results (default 5)."}
                },
                "required": ["query"]
            }),
        )
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        _: &ToolContext<'_>,
    ) -> Result<String, String> {
        let query = arguments.get("query").and_then(Value::as_str).unwrap_or_default();
        let k = arguments.get("k").and_then(Value::as_u64).unwrap_or(5) as usize;
        let hits = self.0.search(query, k)?;
        if hits.is_empty() {
            return Ok(format!("no document matches {query:?}"));
        }
        Ok(hits
            .iter()
            .enumerate()
            .map(|(i, h)| {
                format!("{}. [{}] {}\n   {}", i + 1, h.id, h.title, h.snippet.replace('\n', " "))
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }
}

#[async_trait]
impl Tool for OpenTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "open",
            "Open a document of the collection by its id (as `search` shows it), one page at a time.",
            json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "page": {"type": "integer", "minimum": 1, "description": "Page number (default 1)."}
                },
                "required": ["id"]
            }),
        )
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        _: &ToolContext<'_>,
    ) -> Result<String, String> {
        let id = arguments.get("id").and_then(Value::as_str).unwrap_or_default();
        let page = arguments.get("page").and_then(Value::as_u64).unwrap_or(1) as usize;
        let (doc, text, pages) = self.0.open(id.trim(), page)?;
        Ok(format!("[{}] {} (page {page} of {pages})\n\n{text}", doc.id, doc.title))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        let doc = |id: &str, title: &str, text: &str| Document {
            id: id.into(),
            title: title.into(),
            text: text.into(),
        };
        Corpus::new(vec![
            doc("a", "Ostrel Guild", "The Ostrel Guild was founded in 1412 in the town of Hawen."),
            doc("b", "Hawen", "Hawen is a river town in the region of Pikrysand."),
            doc("c", "Pikrysand", "Pikrysand is a region whose seat is Skokbom."),
            doc("d", "Long", &"word ".repeat(2000)),
        ])
        .expect("corpus")
    }

    #[test]
    fn search_ranks_by_bm25_and_names_the_passage() {
        let c = corpus();
        let hits = c.search("Ostrel Guild founded", 3).expect("search");
        assert_eq!(hits[0].id, "a");
        assert!(hits[0].snippet.contains("1412"), "{}", hits[0].snippet);
        // The title counts double: "Hawen" ranks its own document above the one that mentions it.
        let hits = c.search("hawen", 5).expect("search");
        assert_eq!(hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["b", "a"]);
        // A query the parser would refuse is read leniently.
        assert_eq!(c.search("\"Pikrysand seat:", 1).expect("lenient")[0].id, "c");
        assert!(c.search("zzzz", 5).expect("search").is_empty());
        assert!(c.search("  ", 5).is_err());
        assert!(c.search(&"x".repeat(2000), 5).is_err());
    }

    #[test]
    fn open_pages_long_documents() {
        let c = corpus();
        let (_, text, pages) = c.open("d", 1).expect("open");
        assert_eq!((text.chars().count(), pages), (PAGE_CHARS, 3));
        let (_, last, _) = c.open("d", 3).expect("open");
        assert_eq!(last.chars().count(), 10_000 - 2 * PAGE_CHARS);
        assert!(c.open("d", 4).unwrap_err().contains("3 page(s)"));
        assert!(c.open("nope", 1).unwrap_err().contains("no document"));
    }

    #[test]
    fn duplicate_ids_and_empty_corpora_are_refused() {
        let d = Document { id: "x".into(), title: String::new(), text: "t".into() };
        assert!(Corpus::new(vec![d.clone(), d]).unwrap_err().contains("twice"));
        assert!(Corpus::new(Vec::new()).is_err());
    }
}
