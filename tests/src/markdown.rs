//! Reading documentation as the tests run it: fenced code blocks, and expected output with
//! `...` wildcards.

/// `line` matches `pattern`, where `...` in the pattern stands for any text.
pub fn matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("...").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// One fenced code block of a markdown document.
#[derive(Debug)]
pub struct Block {
    /// The fence's info string (`sh`, `sh servers`, ...).
    pub info: String,
    /// The 1-based line number of its opening fence in the document.
    pub line: usize,
    /// Its lines, fences excluded.
    pub lines: Vec<String>,
}

impl Block {
    /// The output the document promises: the `#>` lines, without the marker (and one space
    /// after it).
    pub fn expected(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter_map(|l| l.trim_start().strip_prefix("#>"))
            .map(|l| l.strip_prefix(' ').unwrap_or(l).to_owned())
            .collect()
    }

    /// The commands: every line but the `#>` ones.
    pub fn commands(&self) -> Vec<&str> {
        self.lines
            .iter()
            .map(String::as_str)
            .filter(|l| !l.trim_start().starts_with("#>"))
            .collect()
    }

    /// [`Block::commands`] as one script, each line ended by a newline.
    pub fn script(&self) -> String {
        self.commands().join("\n") + "\n"
    }
}

/// The fenced code blocks of `markdown` (fences of three backticks at the start of a line), in
/// order; panics on a fence that is never closed.
pub fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in markdown.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block { info: info.trim().to_owned(), line: i + 1, lines: vec![] });
            }
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some(b), None) => b.lines.push(line.to_owned()),
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code fence");
    out
}

/// The code of the `lang` blocks (fence info `lang`) of the `## title` section of `markdown`,
/// each ending with a newline, in order; panics when there is no such section.
pub fn section_code(markdown: &str, title: &str, lang: &str) -> Vec<String> {
    let section = markdown
        .split(&format!("\n## {title}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("a {title} section"));
    let section = section.split("\n## ").next().unwrap_or_default();
    blocks(section)
        .into_iter()
        .filter(|b| b.info == lang)
        .map(|b| b.lines.join("\n") + "\n")
        .collect()
}
