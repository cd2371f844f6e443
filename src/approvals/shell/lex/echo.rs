//! What a command substitution of `echo` or `printf` of literal words
//! prints, resolved without running it.

use std::collections::HashMap;

use super::{Budget, Words, new};

/// What `script` prints if it is a lone `echo` or `printf` of literal
/// words (variables known in `vars` included).
pub(super) fn echoed(
    script: &str,
    vars: &HashMap<String, String>,
    depth: usize,
    budget: &mut Budget,
) -> Option<String> {
    if !budget.take(script.len() + vars.values().map(String::len).sum::<usize>()) {
        return None;
    }
    let mut lexer = new(script, *budget);
    lexer.vars = vars.clone();
    lexer.depth = depth;
    let (lexed, left) = lexer.run();
    *budget = left;
    // (What a redirection sends elsewhere is not the output.)
    let [
        Words {
            words,
            redirections,
            ..
        },
    ] = lexed.segments.as_slice()
    else {
        return None;
    };
    if !redirections.is_empty() {
        return None;
    }
    if words.iter().any(|w| w.contains('$') || w.contains('`')) {
        return None;
    }
    match words.first()?.as_str() {
        "echo" => {
            let args = words[1..]
                .iter()
                .skip_while(|w| matches!(w.as_str(), "-n" | "-e" | "-E" | "-ne" | "-en"));
            let said = args.cloned().collect::<Vec<_>>().join(" ");
            Some(unescape(&said))
        }
        // Where a program is: for this purpose, the program.
        "which" | "whence" if words.len() == 2 => Some(words[1].clone()),
        "command" | "type"
            if words.len() == 3 && matches!(words[1].as_str(), "-v" | "-p" | "-P") =>
        {
            Some(words[2].clone())
        }
        "printf" => {
            let format = unescape(words.get(1)?);
            let args = &words[2..];
            if format == "%s" || format == "%s\n" {
                return Some(args.join(""));
            }
            if args.is_empty() && !format.contains('%') {
                return Some(format.trim_end_matches('\n').to_string());
            }
            None
        }
        _ => None,
    }
}

/// `text` with printf's (and `echo -e`'s) backslash escapes read: `\xHH`,
/// `\NNN` (octal, `\0NNN` too), `\n`, `\t`, `\\`.
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let digits =
            |radix: u32, most: usize, chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
                let mut n = String::new();
                while n.len() < most {
                    match chars.next_if(|c| c.is_digit(radix)) {
                        Some(d) => n.push(d),
                        None => break,
                    }
                }
                u32::from_str_radix(&n, radix).ok().and_then(char::from_u32)
            };
        match chars.next() {
            Some('x') => out.extend(digits(16, 2, &mut chars)),
            Some('0') => out.extend(digits(8, 3, &mut chars).or(Some('\0'))),
            Some(d @ '1'..='7') => {
                let mut n = d.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.next_if(|c| c.is_digit(8)) {
                        Some(more) => n = n * 8 + more.to_digit(8).unwrap_or(0),
                        None => break,
                    }
                }
                out.extend(char::from_u32(n));
            }
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}
