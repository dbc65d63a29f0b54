//! Finding where things are in JSON text: comments and trailing commas
//! blanked out (offsets kept), then the byte spans of values and object
//! members, which is all a splice needs.

use anyhow::{Context, bail};

/// Deeper than any configuration file nests; also bounds the recursion.
const MAX_DEPTH: usize = 200;

/// `text` with comments and trailing commas replaced by spaces (newlines
/// kept, so error positions still match the file).
pub fn blank_comments(text: &str) -> anyhow::Result<String> {
    let mut bytes = text.as_bytes().to_vec();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match (b, bytes.get(i + 1)) {
            (b'"', _) => in_string = true,
            (b'/', Some(b'/')) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    bytes[i] = b' ';
                    i += 1;
                }
                continue;
            }
            (b'/', Some(b'*')) => {
                let start = i;
                let mut closed = false;
                while i < bytes.len() {
                    if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') && i > start + 1 {
                        bytes[i] = b' ';
                        bytes[i + 1] = b' ';
                        i += 2;
                        closed = true;
                        break;
                    }
                    if bytes[i] != b'\n' && bytes[i] != b'\r' {
                        bytes[i] = b' ';
                    }
                    i += 1;
                }
                if !closed {
                    bail!("a /* comment is never closed");
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    // Trailing commas, now that no comment sits between one and its bracket.
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b',' {
            let next = bytes[i + 1..]
                .iter()
                .find(|c| !c.is_ascii_whitespace())
                .copied();
            if matches!(next, Some(b'}') | Some(b']')) {
                bytes[i] = b' ';
            }
        }
        i += 1;
    }
    String::from_utf8(bytes).context("blanking comments broke the text's encoding")
}

/// A value's place in the text; an object also lists its members.
#[derive(Debug)]
pub struct Node {
    pub start: usize,
    pub end: usize,
    /// Some for an object: its members in order.
    pub members: Option<Vec<Member>>,
}

#[derive(Debug)]
pub struct Member {
    /// The key, unescaped.
    pub key: String,
    /// Where the key's literal (quotes included) starts and ends.
    pub key_start: usize,
    pub key_end: usize,
    pub value: Node,
}

impl Node {
    pub fn text<'t>(&self, text: &'t str) -> &'t str {
        &text[self.start..self.end]
    }
}

/// Finds where values are in text that serde_json has already accepted:
/// it checks only what it needs to stay on track.
pub struct Parser<'t> {
    text: &'t str,
    pos: usize,
}

impl<'t> Parser<'t> {
    pub fn new(text: &'t str) -> Self {
        Parser { text, pos: 0 }
    }

    pub fn document(mut self) -> anyhow::Result<Node> {
        self.value(0)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> anyhow::Result<()> {
        self.skip_ws();
        if self.peek() != Some(byte) {
            bail!("expected '{}' at byte {}", byte as char, self.pos);
        }
        self.pos += 1;
        Ok(())
    }

    fn value(&mut self, depth: usize) -> anyhow::Result<Node> {
        if depth > MAX_DEPTH {
            bail!("nested deeper than {MAX_DEPTH} levels");
        }
        self.skip_ws();
        let start = self.pos;
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => {
                self.pos += 1;
                self.skip_ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                } else {
                    loop {
                        self.value(depth + 1)?;
                        self.skip_ws();
                        match self.peek() {
                            Some(b',') => self.pos += 1,
                            Some(b']') => {
                                self.pos += 1;
                                break;
                            }
                            _ => bail!("expected ',' or ']' at byte {}", self.pos),
                        }
                    }
                }
                Ok(self.node(start, None))
            }
            Some(b'"') => {
                self.string()?;
                Ok(self.node(start, None))
            }
            Some(_) => {
                while self
                    .peek()
                    .is_some_and(|b| !b.is_ascii_whitespace() && !b",]}:".contains(&b))
                {
                    self.pos += 1;
                }
                if self.pos == start {
                    bail!("expected a value at byte {start}");
                }
                Ok(self.node(start, None))
            }
            None => bail!("the text ends where a value should be"),
        }
    }

    fn object(&mut self, depth: usize) -> anyhow::Result<Node> {
        let start = self.pos;
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(self.node(start, Some(members)));
        }
        loop {
            self.skip_ws();
            let key_start = self.pos;
            self.string()?;
            let key_end = self.pos;
            let key: String = serde_json::from_str(&self.text[key_start..key_end])
                .with_context(|| format!("reading the key at byte {key_start}"))?;
            self.expect(b':')?;
            let value = self.value(depth + 1)?;
            members.push(Member {
                key,
                key_start,
                key_end,
                value,
            });
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(self.node(start, Some(members)));
                }
                _ => bail!("expected ',' or '}}' at byte {}", self.pos),
            }
        }
    }

    /// Past one string literal, escapes included.
    fn string(&mut self) -> anyhow::Result<()> {
        if self.peek() != Some(b'"') {
            bail!("expected a string at byte {}", self.pos);
        }
        self.pos += 1;
        loop {
            match self.peek() {
                Some(b'\\') => self.pos += 2,
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(_) => self.pos += 1,
                None => bail!("a string is never closed"),
            }
        }
    }

    fn node(&self, start: usize, members: Option<Vec<Member>>) -> Node {
        Node {
            start,
            end: self.pos.min(self.text.len()),
            members,
        }
    }
}
