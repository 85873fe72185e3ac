//! Output formats, the one colour scheme for statuses and states, tables, JSON and YAML.

use std::io::IsTerminal;

use clap::ValueEnum;
use comfy_table::{Attribute, Cell, Color, ContentArrangement, Table, presets};
use owo_colors::{AnsiColors, OwoColorize};
use serde::Serialize;
use skyhook::schema::{State, Status, go_json};

use crate::app::error::CliError;

/// `-o/--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable table
    #[default]
    Table,
    /// Table with extra columns
    Wide,
    /// JSON (stable field names, for scripts)
    Json,
    /// YAML (same fields as JSON)
    Yaml,
    /// One `kind/name` line per object, as `kubectl get -o name` (node/worker-1)
    Name,
}

/// A status or state word as shown to users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    Status(Status),
    State(State),
}

impl From<Status> for Word {
    fn from(s: Status) -> Word {
        Word::Status(s)
    }
}

impl From<State> for Word {
    fn from(s: State) -> Word {
        Word::State(s)
    }
}

/// The colour family of a status or state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Done: green.
    Good,
    /// Work under way or queued: yellow.
    Busy,
    /// Failing: red, bold.
    Bad,
    /// Held by a person: magenta.
    Held,
    /// Switched off or skipped: grey.
    Off,
    /// Nothing known: dim.
    Faint,
}

/// The single mapping from statuses and states to colours, used by every command.
pub fn tone(word: impl Into<Word>) -> Tone {
    match word.into() {
        Word::Status(Status::Complete) | Word::State(State::Complete) => Tone::Good,
        Word::Status(Status::InProgress | Status::Waiting) | Word::State(State::InProgress) => {
            Tone::Busy
        }
        Word::Status(Status::Erroring) | Word::State(State::Erroring) => Tone::Bad,
        Word::Status(Status::Paused) => Tone::Held,
        Word::Status(Status::Blocked | Status::Disabled) | Word::State(State::Skipped) => Tone::Off,
        Word::Status(Status::Unknown) | Word::State(State::Unknown) => Tone::Faint,
    }
}

impl Tone {
    /// ANSI palette index (the same colour whether written by owo-colors or by the table).
    fn ansi(self) -> Option<(AnsiColors, u8)> {
        match self {
            Tone::Good => Some((AnsiColors::Green, 2)),
            Tone::Busy => Some((AnsiColors::Yellow, 3)),
            Tone::Bad => Some((AnsiColors::Red, 1)),
            Tone::Held => Some((AnsiColors::Magenta, 5)),
            Tone::Off => Some((AnsiColors::BrightBlack, 8)),
            Tone::Faint => None,
        }
    }
}

/// Whether to colour stdout: never with `--no-color` or a non-empty `NO_COLOR`; always with
/// `CLICOLOR_FORCE`/`FORCE_COLOR` (non-empty, not `0`); otherwise only on a terminal that is
/// not `TERM=dumb`.
pub fn color_enabled(
    no_color_flag: bool,
    env: impl Fn(&str) -> Option<String>,
    stdout_is_terminal: bool,
) -> bool {
    let set = |k: &str| env(k).is_some_and(|v| !v.is_empty());
    let forced = |k: &str| env(k).is_some_and(|v| !v.is_empty() && v != "0");
    if no_color_flag || set("NO_COLOR") {
        return false;
    }
    if forced("CLICOLOR_FORCE") || forced("FORCE_COLOR") {
        return true;
    }
    stdout_is_terminal && env("TERM").as_deref() != Some("dumb")
}

/// Applies (or not) the colour scheme.
#[derive(Debug, Clone, Copy)]
pub struct Painter {
    color: bool,
    no_headers: bool,
}

impl Painter {
    pub fn new(color: bool) -> Painter {
        Painter {
            color,
            no_headers: false,
        }
    }

    /// `--no-headers`: tables without their header line.
    pub fn without_headers(self, no_headers: bool) -> Painter {
        Painter { no_headers, ..self }
    }

    /// From the flag, the environment and stdout.
    pub fn detect(no_color_flag: bool) -> Painter {
        Painter::new(color_enabled(
            no_color_flag,
            |k| std::env::var(k).ok(),
            std::io::stdout().is_terminal(),
        ))
    }

    pub fn paint(&self, text: &str, tone: Tone) -> String {
        if !self.color {
            return text.to_string();
        }
        match tone {
            Tone::Bad => text.red().bold().to_string(),
            Tone::Faint => text.dimmed().to_string(),
            other => match other.ansi() {
                Some((c, _)) => text.color(c).to_string(),
                None => text.to_string(),
            },
        }
    }

    fn cell(&self, field: &Field) -> Cell {
        let cell = Cell::new(&field.text);
        match (self.color, field.tone) {
            (true, Some(Tone::Faint)) => cell.add_attribute(Attribute::Dim),
            (true, Some(Tone::Bad)) => cell.fg(Color::AnsiValue(1)).add_attribute(Attribute::Bold),
            (true, Some(t)) => match t.ansi() {
                Some((_, idx)) => cell.fg(Color::AnsiValue(idx)),
                None => cell,
            },
            _ => cell,
        }
    }

    /// kubectl-style table: upper-case headers, no borders, columns three spaces apart, no
    /// trailing spaces.
    /// The table under a title, which `--no-headers` leaves out along with the header row.
    pub fn titled_table(&self, title: &str, headers: &[&str], rows: &[Vec<Field>]) -> String {
        let table = self.table(headers, rows);
        if self.no_headers {
            return table;
        }
        format!("{title}\n\n{table}")
    }

    pub fn table(&self, headers: &[&str], rows: &[Vec<Field>]) -> String {
        let mut table = Table::new();
        table
            .load_style(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled);
        if !self.no_headers {
            table.set_header(headers.iter().map(|h| Cell::new(*h)).collect::<Vec<_>>());
        }
        for row in rows {
            table.add_row(row.iter().map(|f| self.cell(f)).collect::<Vec<_>>());
        }
        let last = headers.len().saturating_sub(1);
        for (i, column) in table.column_iter_mut().enumerate() {
            column.set_padding((0, if i == last { 0 } else { 3 }));
        }
        if self.color {
            table.enforce_styling();
            table.style_text_only();
        } else {
            table.force_no_tty();
        }
        let mut out = String::new();
        for line in table.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Colours of labels that only need telling apart (log prefixes per stage), not meaning.
const SLOT_COLORS: [AnsiColors; 6] = [
    AnsiColors::Cyan,
    AnsiColors::Blue,
    AnsiColors::Magenta,
    AnsiColors::Green,
    AnsiColors::Yellow,
    AnsiColors::BrightCyan,
];

impl Painter {
    /// `text` in the colour of `slot`, so the same stage always has the same colour.
    pub fn paint_slot(&self, text: &str, slot: usize) -> String {
        if self.color {
            text.color(SLOT_COLORS[slot % SLOT_COLORS.len()])
                .to_string()
        } else {
            text.to_string()
        }
    }
}

/// One table cell: text, and the tone to colour it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub text: String,
    pub tone: Option<Tone>,
}

impl Field {
    pub fn toned(text: impl Into<String>, tone: Tone) -> Field {
        Field {
            text: text.into(),
            tone: Some(tone),
        }
    }
}

impl From<String> for Field {
    fn from(text: String) -> Field {
        Field { text, tone: None }
    }
}

impl From<&str> for Field {
    fn from(text: &str) -> Field {
        Field::from(text.to_string())
    }
}

/// Indented JSON exactly as the Go plugin prints it (`json.MarshalIndent(v, "", "  ")` + `\n`).
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<String, CliError> {
    go_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| CliError::Encode(e.to_string()))
}

/// YAML with the same field names as the JSON output.
pub fn yaml<T: Serialize + ?Sized>(value: &T) -> Result<String, CliError> {
    serde_saphyr::to_string(&value).map_err(|e| CliError::Encode(e.to_string()))
}

/// JSON or YAML for `-o json|yaml`; `None` for the table formats.
pub fn structured<T: Serialize + ?Sized>(
    format: OutputFormat,
    value: &T,
) -> Result<Option<String>, CliError> {
    match format {
        OutputFormat::Json => json(value).map(Some),
        OutputFormat::Yaml => yaml(value).map(Some),
        OutputFormat::Table | OutputFormat::Wide | OutputFormat::Name => Ok(None),
    }
}

/// The renderings that need no table: `-o name` (`<resource>/<name>` lines, see [`names`])
/// and [`structured`]; `None` for a table.
pub fn untabled<'a, T: Serialize + ?Sized>(
    format: OutputFormat,
    resource: &str,
    names_of: impl IntoIterator<Item = &'a str>,
    value: &T,
) -> Result<Option<String>, CliError> {
    if format == OutputFormat::Name {
        return Ok(Some(names(resource, names_of)));
    }
    structured(format, value)
}

/// [`untabled`], or `empty` when a table would have no rows.
pub fn untabled_or<'a, T: Serialize + ?Sized>(
    format: OutputFormat,
    (resource, names_of): (&str, impl IntoIterator<Item = &'a str>),
    value: &T,
    rows: usize,
    empty: impl FnOnce() -> String,
) -> Result<Option<String>, CliError> {
    match untabled(format, resource, names_of, value)? {
        Some(text) => Ok(Some(text)),
        None => Ok((rows == 0).then(empty)),
    }
}

/// `-o name`: `<resource>/<name>` lines, each name once, in the order given.
pub fn names<'a>(resource: &str, names: impl IntoIterator<Item = &'a str>) -> String {
    let mut seen = std::collections::HashSet::new();
    let mut out = String::new();
    for name in names {
        if seen.insert(name) {
            out.push_str(resource);
            out.push('/');
            out.push_str(name);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn every_status_and_state_has_a_tone() {
        let tones: Vec<Tone> = Status::ALL.into_iter().map(tone).collect();
        assert_eq!(
            tones,
            [
                Tone::Good,
                Tone::Off,
                Tone::Busy,
                Tone::Off,
                Tone::Held,
                Tone::Busy,
                Tone::Bad,
                Tone::Faint
            ]
        );
        let tones: Vec<Tone> = State::ALL.into_iter().map(tone).collect();
        assert_eq!(
            tones,
            [Tone::Good, Tone::Busy, Tone::Off, Tone::Bad, Tone::Faint]
        );
        // Same word, same colour, whichever enum it came from.
        assert_eq!(tone(Status::Erroring), tone(State::Erroring));
        assert_eq!(tone(Status::Complete), tone(State::Complete));
    }

    #[test]
    fn color_decision() {
        assert!(color_enabled(false, env(&[]), true));
        assert!(!color_enabled(false, env(&[]), false));
        assert!(!color_enabled(true, env(&[]), true));
        assert!(!color_enabled(false, env(&[("NO_COLOR", "1")]), true));
        assert!(color_enabled(false, env(&[("NO_COLOR", "")]), true));
        assert!(!color_enabled(false, env(&[("TERM", "dumb")]), true));
        assert!(color_enabled(false, env(&[("CLICOLOR_FORCE", "1")]), false));
        assert!(!color_enabled(
            false,
            env(&[("CLICOLOR_FORCE", "0")]),
            false
        ));
        assert!(!color_enabled(
            false,
            env(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]),
            false
        ));
        assert!(!color_enabled(true, env(&[("FORCE_COLOR", "1")]), true));
    }

    fn sample_rows() -> Vec<Vec<Field>> {
        vec![
            vec![
                "worker-1".into(),
                Field::toned("complete", Tone::Good),
                "3/3".into(),
            ],
            vec![
                "worker-22".into(),
                Field::toned("ERRORING", Tone::Bad),
                "1/3".into(),
            ],
        ]
    }

    #[test]
    fn plain_table_layout() {
        let text = Painter::new(false).table(&["NODE", "STATUS", "PACKAGES"], &sample_rows());
        assert_eq!(
            text,
            "NODE        STATUS     PACKAGES\n\
             worker-1    complete   3/3\n\
             worker-22   ERRORING   1/3\n"
        );
    }

    #[test]
    fn coloured_table_keeps_alignment() {
        let text = Painter::new(true).table(&["NODE", "STATUS", "PACKAGES"], &sample_rows());
        assert!(text.contains('\u{1b}'), "{text:?}");
        let stripped: String = strip_ansi(&text);
        assert_eq!(
            stripped,
            Painter::new(false).table(&["NODE", "STATUS", "PACKAGES"], &sample_rows())
        );
        assert!(text.contains("\u{1b}[38;5;2mcomplete"), "{text:?}");
    }

    #[test]
    fn no_headers_drops_the_header_line_only() {
        let p = Painter::new(false).without_headers(true);
        assert!(p.no_headers);
        assert_eq!(
            p.table(&["NODE", "STATUS", "PACKAGES"], &sample_rows()),
            "worker-1    complete   3/3\n\
             worker-22   ERRORING   1/3\n"
        );
        let coloured = Painter::new(true).without_headers(true);
        let text = coloured.table(&["NODE", "STATUS", "PACKAGES"], &sample_rows());
        assert_eq!(
            strip_ansi(&text),
            p.table(&["NODE", "STATUS", "PACKAGES"], &sample_rows())
        );
    }

    #[test]
    fn names_are_kind_slash_name_once_each() {
        assert_eq!(names("node", ["b", "a", "b"]), "node/b\nnode/a\n");
        assert_eq!(names("job.batch", Vec::<&str>::new()), "");
    }

    #[test]
    fn painter_respects_switch() {
        assert_eq!(Painter::new(false).paint("erroring", Tone::Bad), "erroring");
        let red = Painter::new(true).paint("erroring", Tone::Bad);
        assert!(
            red.contains("\u{1b}[31m") && red.contains("erroring"),
            "{red:?}"
        );
        let green = Painter::new(true).paint("complete", Tone::Good);
        assert_eq!(green, "\u{1b}[32mcomplete\u{1b}[39m");
    }

    #[test]
    fn json_is_go_indented() {
        #[derive(Serialize)]
        struct S<'a> {
            a: &'a str,
            b: Vec<u8>,
        }
        assert_eq!(
            json(&S {
                a: "x<y",
                b: vec![1]
            })
            .unwrap(),
            "{\n  \"a\": \"x\\u003cy\",\n  \"b\": [\n    1\n  ]\n}\n"
        );
        let y = yaml(&S { a: "x", b: vec![] }).unwrap();
        assert!(y.contains("a: x"), "{y}");
    }

    /// Removes CSI escape sequences.
    pub(crate) fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' && chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}
