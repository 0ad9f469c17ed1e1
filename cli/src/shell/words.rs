//! Splitting a shell line into words, POSIX-shell style: blanks separate words, `'…'` quotes
//! literally, `"…"` quotes with `\` escaping `"`, `\` and `$`, and `\` outside quotes escapes
//! the next character. A `#` at the start of a word starts a comment.

/// One word and where it starts in the line (byte offset of its first character, quotes
/// included).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Word {
    /// The word with quotes removed.
    pub text: String,
    /// Byte offset of its start in the line.
    pub start: usize,
}

/// Why a line cannot be split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unterminated(pub char);

impl std::fmt::Display for Unterminated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unterminated {} quote", self.0)
    }
}

/// Splits `line`. An unterminated quote is an error; [`split_partial`] accepts it.
pub fn split(line: &str) -> Result<Vec<String>, Unterminated> {
    let (words, open) = split_partial(line);
    match open {
        Some(q) => Err(Unterminated(q)),
        None => Ok(words.into_iter().map(|w| w.text).collect()),
    }
}

/// Splits `line` as far as it goes (for completion, where the last word may be half typed):
/// the words, and the quote left open at the end, if any.
pub fn split_partial(line: &str) -> (Vec<Word>, Option<char>) {
    let mut words = Vec::new();
    let mut cur: Option<Word> = None;
    let mut quote: Option<char> = None;
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match quote {
            Some('\'') => {
                if c == '\'' {
                    quote = None;
                } else if let Some(w) = cur.as_mut() {
                    w.text.push(c);
                }
            }
            Some(_) => match c {
                '"' => quote = None,
                '\\' if matches!(chars.peek(), Some((_, '"' | '\\' | '$'))) => {
                    if let (Some((_, n)), Some(w)) = (chars.next(), cur.as_mut()) {
                        w.text.push(n);
                    }
                }
                _ => {
                    if let Some(w) = cur.as_mut() {
                        w.text.push(c);
                    }
                }
            },
            None => {
                if c.is_whitespace() {
                    if let Some(w) = cur.take() {
                        words.push(w);
                    }
                    continue;
                }
                if c == '#' && cur.is_none() {
                    break;
                }
                let w = cur.get_or_insert_with(|| Word {
                    text: String::new(),
                    start: i,
                });
                match c {
                    '\'' | '"' => quote = Some(c),
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            w.text.push(n);
                        }
                    }
                    _ => w.text.push(c),
                }
            }
        }
    }
    if let Some(w) = cur {
        words.push(w);
    }
    (words, quote)
}

/// Quotes `s` for a shell line if it needs it.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,:/=@+%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_a_shell() {
        assert_eq!(
            split(r#"a  'b c' "d \"e\"" f\ g --params '{"x": 1}'"#).unwrap(),
            vec!["a", "b c", "d \"e\"", "f g", "--params", r#"{"x": 1}"#]
        );
        assert_eq!(split("ls # a comment").unwrap(), vec!["ls"]);
        assert_eq!(split("a#b").unwrap(), vec!["a#b"]);
        assert_eq!(split("   ").unwrap(), Vec::<String>::new());
        assert_eq!(split("'open"), Err(Unterminated('\'')));
    }

    #[test]
    fn partial_lines_keep_offsets_and_open_quotes() {
        let (w, open) = split_partial("cmd 'half");
        assert_eq!(open, Some('\''));
        assert_eq!(
            w[1],
            Word {
                text: "half".into(),
                start: 4
            }
        );
        let (w, open) = split_partial("x  y");
        assert_eq!(open, None);
        assert_eq!(w[1].start, 3);
    }

    #[test]
    fn quoting_round_trips() {
        for s in ["plain", "with space", "it's", "", "{\"a\":1}"] {
            assert_eq!(split(&quote(s)).unwrap(), vec![s.to_string()]);
        }
    }
}
