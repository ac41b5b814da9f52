//! Reading one Rust file as the architecture test needs it: the paths it
//! names (`use` statements and inline `crate::`/`super::`/`self::` paths),
//! each with its line, the inline module it sits in (`mod tests { .. }`),
//! and whether it is a re-export (`pub use`). Comments, strings and
//! character literals are blanked first, so a path in them is no arrow;
//! the whole file is read, test modules and what follows them included.

/// One path named in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// 1-based line of the statement or expression.
    pub line: usize,
    /// The inline modules (`mod name { .. }`) around it, outermost first.
    pub inline: Vec<String>,
    /// The path's segments, `as` renames removed (`crate::a::B`).
    pub path: Vec<String>,
    /// For a re-export, the name it is exported under (`B`, or the `as`).
    pub exported_as: Option<String>,
    /// From a `use` statement (else an inline path in code).
    pub from_use: bool,
}

/// Everything the architecture test reads from one file.
#[derive(Debug, Default)]
pub struct FileScan {
    /// Paths from `use` statements and inline paths in code.
    pub named: Vec<Named>,
    /// Lines of `pub use` statements (any visibility but private).
    pub reexport_lines: Vec<usize>,
}

/// The source with comments and the insides of string and character
/// literals replaced by spaces (line breaks kept, so lines still count).
pub fn blank_comments_and_literals(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !i.checked_sub(1).is_some_and(|p| ident(chars[p]))
            && raw_string_hashes(&chars, if c == 'b' { i + 2 } else { i + 1 }).is_some()
        {
            // r"..", r#".."#, br#".."#: no escapes, ends at `"` and the hashes.
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = raw_string_hashes(&chars, start).unwrap_or(0);
            let mut j = start + hashes + 1;
            while j < chars.len() {
                if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                    j += hashes + 1;
                    break;
                }
                j += 1;
            }
            for &skipped in &chars[i..j.min(chars.len())] {
                out.push(blank(skipped));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&skipped) = chars.get(i) {
                    out.push(blank(skipped));
                }
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{1F600}') or a lifetime
            // ('a, 'static): only the literal is blanked.
            let end = if next == Some('\\') {
                (i + 3..chars.len()).find(|&j| chars[j] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for _ in i..=end {
                        out.push(' ');
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `at`: `#`* then `"` (the opening of a raw string), as the count of
/// hashes.
fn raw_string_hashes(chars: &[char], at: usize) -> Option<usize> {
    let hashes = chars[at.min(chars.len())..]
        .iter()
        .take_while(|&&c| c == '#')
        .count();
    (chars.get(at + hashes) == Some(&'"')).then_some(hashes)
}

/// The paths a file names, read from its blanked source.
pub fn scan(source: &str) -> FileScan {
    let code = blank_comments_and_literals(source);
    let mut scan = FileScan::default();
    // Inline modules open: (name, the brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_mod: Option<String> = None;
    let tokens = tokens(&code);
    let mut t = 0;
    while t < tokens.len() {
        let (line, token) = (tokens[t].0, tokens[t].1.as_str());
        match token {
            "{" => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((name, depth));
                }
            }
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            ";" => pending_mod = None,
            "mod" => {
                if let Some((_, name)) = tokens.get(t + 1) {
                    pending_mod = Some(name.clone());
                }
            }
            "use" if starts_statement(&tokens, t) => {
                let reexport = is_public(&tokens, t);
                let end = (t..tokens.len())
                    .find(|&e| tokens[e].1 == ";")
                    .unwrap_or(tokens.len());
                let body: String = tokens[t + 1..end]
                    .iter()
                    .map(|(_, s)| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                if reexport {
                    scan.reexport_lines.push(line);
                }
                for (path, alias) in expand_use(&body) {
                    let exported_as = reexport.then(|| alias.clone());
                    scan.named.push(Named {
                        line,
                        inline: inline.iter().map(|(n, _)| n.clone()).collect(),
                        path,
                        exported_as,
                        from_use: true,
                    });
                }
                t = end;
                continue;
            }
            "crate" | "super" | "self" if tokens.get(t + 1).is_some_and(|(_, s)| s == "::") => {
                let preceded_by_path = t > 0 && tokens[t - 1].1 == "::";
                if !preceded_by_path {
                    let mut path = vec![token.to_string()];
                    let mut k = t + 1;
                    while tokens.get(k).is_some_and(|(_, s)| s == "::") {
                        match tokens.get(k + 1) {
                            Some((_, s)) if is_ident(s) => path.push(s.clone()),
                            _ => break,
                        }
                        k += 2;
                    }
                    scan.named.push(Named {
                        line,
                        inline: inline.iter().map(|(n, _)| n.clone()).collect(),
                        path,
                        exported_as: None,
                        from_use: false,
                    });
                    t = k;
                    continue;
                }
            }
            _ => {}
        }
        t += 1;
    }
    scan
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// `use` begins a statement: after `;`, `{`, `}`, an attribute's `]`, a
/// visibility (`pub`, `pub(crate)`) or at the start of the file.
fn starts_statement(tokens: &[(usize, String)], at: usize) -> bool {
    matches!(
        at.checked_sub(1).map(|p| tokens[p].1.as_str()),
        None | Some(";" | "{" | "}" | "]" | "pub" | ")")
    )
}

/// `pub use`, `pub(crate) use`, `pub(super) use`, `pub(in x) use`.
fn is_public(tokens: &[(usize, String)], at: usize) -> bool {
    match at.checked_sub(1).map(|p| tokens[p].1.as_str()) {
        Some("pub") => true,
        Some(")") => {
            let open = (0..at).rev().find(|&p| tokens[p].1 == "(");
            open.and_then(|p| p.checked_sub(1))
                .is_some_and(|p| tokens[p].1 == "pub")
        }
        _ => false,
    }
}

/// Identifiers, `::`, and single punctuation characters, with their line.
fn tokens(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (index, line) in code.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c.is_alphanumeric() || c == '_' {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push((index + 1, chars[start..i].iter().collect()));
            } else if c == ':' && chars.get(i + 1) == Some(&':') {
                out.push((index + 1, "::".to_string()));
                i += 2;
            } else if !c.is_whitespace() {
                out.push((index + 1, c.to_string()));
                i += 1;
            } else {
                i += 1;
            }
        }
    }
    out
}

/// `crate::a::{b, c::{d, e as f}, self}` -> each path with the name it is
/// bound to: `(crate::a::b, b)`, `(crate::a::c::d, d)`, `(crate::a::c::e,
/// f)`, `(crate::a, a)`. The body is tokens joined by spaces.
pub fn expand_use(body: &str) -> Vec<(Vec<String>, String)> {
    let compact: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    expand_into(&[], &compact, &mut out);
    out
}

fn expand_into(prefix: &[String], text: &str, out: &mut Vec<(Vec<String>, String)>) {
    for item in split_top_level(text) {
        let item = item.trim();
        let (head, group) = match item.find('{') {
            Some(open) => (&item[..open], item[open + 1..].strip_suffix('}')),
            None => (item, None),
        };
        let (head, alias) = match head.split_once(" as ") {
            Some((head, alias)) => (head, Some(alias.trim().to_string())),
            None => (head, None),
        };
        let mut path = prefix.to_vec();
        path.extend(
            head.split("::")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
        );
        // `a::{self}` names `a` itself.
        if path.last().is_some_and(|s| s == "self") && path.len() > 1 {
            path.pop();
        }
        match group {
            Some(group) => expand_into(&path, group, out),
            None if !path.is_empty() => {
                let bound = alias.unwrap_or_else(|| path.last().cloned().unwrap_or_default());
                out.push((path, bound));
            }
            None => {}
        }
    }
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items.into_iter().filter(|s| !s.trim().is_empty()).collect()
}
