//! Panels: what a plugin shows on the dashboard, as data the dashboard draws.
//!
//! A plugin that has something to show answers `GET /panel` (the dashboard
//! asks `/api/plugins/<name>/panel`, with `?job=<job>` on a job's page and
//! every control's current value as a query parameter). The answer is a
//! [`Panel`]: a title, controls, and items of a few kinds every panel needs:
//! sentences, figures, tables with bars, a categorical strip, a flame graph,
//! lists and download links. The dashboard knows these kinds and no plugin,
//! so a plugin's view comes with the plugin: a new plugin gets its panel
//! without a dashboard change, and the same sentence is never written twice.
//!
//! ```ignore
//! let mut p = Panel::new("Serving");
//! p.text("3 models, 1 200 requests in the last 10 s");
//! p.table(Table::new("models", &["model", "SLO attainment"])
//!     .row("7", vec![Cell::text("7"), Cell::number(0.8, "80.0 %")]));
//! HttpResponse::json(200, p.to_json())
//! ```
//!
//! A plugin with nothing for a job answers [`Panel::none`] (404): the job's
//! page then draws nothing for it, instead of an empty box.

use serde::Serialize;

use crate::types::HttpResponse;

/// One plugin's view: what `GET /panel` answers.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Panel {
    pub title: String,
    /// Choices the dashboard offers as selects; a change asks for the panel
    /// again with `?<name>=<value>`.
    pub controls: Vec<Control>,
    pub items: Vec<Item>,
}

/// A select above the panel.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Control {
    pub name: String,
    pub label: String,
    /// (value, label) pairs, in the order shown.
    pub options: Vec<(String, String)>,
    /// The value this answer was made for.
    pub value: String,
}

/// How a sentence reads: plain, secondary, a problem, or good news.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Tone {
    #[default]
    Plain,
    Muted,
    Error,
    Ok,
}

/// One part of a panel. `id` names it for the page (and for tests) and lets
/// the dashboard keep what the user did to it (a selected cell) across refreshes.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Item {
    /// A heading.
    Heading {
        text: String,
    },
    /// A sentence.
    Text {
        id: String,
        text: String,
        tone: Tone,
    },
    /// Key figures, label above value.
    Stats {
        id: String,
        stats: Vec<Stat>,
    },
    Table(Table),
    Strip(Strip),
    /// A flame graph, root at the bottom; `tree` is `{name, value, children}`.
    Flame {
        id: String,
        title: String,
        note: String,
        unit: String,
        tree: FlameNode,
    },
    /// A list of sentences, each optionally a link.
    List {
        id: String,
        items: Vec<ListEntry>,
        empty: String,
    },
    /// Links, typically downloads, relative to the plugin's routes when they
    /// do not start with `/` or `#`.
    Links {
        id: String,
        links: Vec<Link>,
    },
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Stat {
    pub label: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ListEntry {
    pub text: String,
    /// Where it links: a dashboard route (`#/jobs/x`) or a plugin route.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub href: String,
    pub tone: Tone,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Link {
    pub label: String,
    pub href: String,
    /// The file name to save as; empty: open in place.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub download: String,
}

/// A table: a header row and rows of cells, each row with a key the page
/// marks it with (`data-key`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Table {
    pub id: String,
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    /// What to say when there are no rows.
    pub empty: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Row {
    pub key: String,
    pub cells: Vec<Cell>,
    pub tone: Tone,
}

/// A cell: its text, optionally the number it shows (`data-value`, so a
/// reader or a test gets the exact figure) and a bar of coloured segments.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Cell {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bar: Vec<Segment>,
    pub tone: Tone,
}

/// A part of a bar: its share of the bar is `value` over the bar's total.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Segment {
    pub label: String,
    pub value: f64,
    /// A CSS colour.
    pub color: String,
}

/// A categorical grid: one row per thing (a rank), one column per moment (a
/// batch), each cell coloured by its category, with a mark on some. The page
/// reads a selected cell's `detail` out loud and keeps the selection.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Strip {
    pub id: String,
    pub title: String,
    /// What a column is ("batch"); the axis is labelled with it.
    pub column_label: String,
    pub rows: Vec<String>,
    pub columns: Vec<i64>,
    /// (name, CSS colour, how many cells have it).
    pub categories: Vec<(String, String, u64)>,
    /// What the mark means, said under the strip.
    pub mark: String,
    pub cells: Vec<StripCell>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct StripCell {
    /// Index into `rows`.
    pub row: u32,
    /// Index into `columns`.
    pub col: u32,
    /// Index into `categories`.
    pub category: u32,
    pub marked: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct FlameNode {
    pub name: String,
    pub value: f64,
    pub children: Vec<FlameNode>,
}

impl Panel {
    pub fn new(title: impl Into<String>) -> Panel {
        Panel {
            title: title.into(),
            ..Panel::default()
        }
    }

    /// The answer of a plugin with nothing to show here.
    pub fn none(why: &str) -> HttpResponse {
        HttpResponse::error(404, why)
    }

    pub fn control(&mut self, name: &str, label: &str, options: Vec<(String, String)>, value: &str) -> &mut Panel {
        self.controls.push(Control {
            name: name.into(),
            label: label.into(),
            options,
            value: value.into(),
        });
        self
    }

    pub fn heading(&mut self, text: impl Into<String>) -> &mut Panel {
        self.items.push(Item::Heading { text: text.into() });
        self
    }

    pub fn text(&mut self, id: &str, text: impl Into<String>, tone: Tone) -> &mut Panel {
        self.items.push(Item::Text {
            id: id.into(),
            text: text.into(),
            tone,
        });
        self
    }

    pub fn stats(&mut self, id: &str, stats: &[(&str, String)]) -> &mut Panel {
        let stats = stats
            .iter()
            .map(|(l, v)| Stat {
                label: (*l).into(),
                value: v.clone(),
            })
            .collect();
        self.items.push(Item::Stats { id: id.into(), stats });
        self
    }

    pub fn table(&mut self, t: Table) -> &mut Panel {
        self.items.push(Item::Table(t));
        self
    }

    pub fn strip(&mut self, s: Strip) -> &mut Panel {
        self.items.push(Item::Strip(s));
        self
    }

    pub fn flame(&mut self, id: &str, title: &str, note: impl Into<String>, unit: &str, tree: FlameNode) -> &mut Panel {
        self.items.push(Item::Flame {
            id: id.into(),
            title: title.into(),
            note: note.into(),
            unit: unit.into(),
            tree,
        });
        self
    }

    pub fn list(&mut self, id: &str, items: Vec<ListEntry>, empty: &str) -> &mut Panel {
        self.items.push(Item::List {
            id: id.into(),
            items,
            empty: empty.into(),
        });
        self
    }

    pub fn links(&mut self, id: &str, links: Vec<Link>) -> &mut Panel {
        self.items.push(Item::Links { id: id.into(), links });
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a panel is plain data")
    }

    /// `200` with the panel.
    pub fn response(&self) -> HttpResponse {
        HttpResponse::json(200, self.to_json())
    }
}

impl Table {
    pub fn new(id: &str, title: &str, columns: &[&str]) -> Table {
        Table {
            id: id.into(),
            title: title.into(),
            columns: columns.iter().map(|c| (*c).into()).collect(),
            ..Table::default()
        }
    }

    pub fn empty(mut self, text: &str) -> Table {
        self.empty = text.into();
        self
    }

    pub fn row(&mut self, key: impl ToString, cells: Vec<Cell>) -> &mut Row {
        self.rows.push(Row {
            key: key.to_string(),
            cells,
            tone: Tone::Plain,
        });
        self.rows.last_mut().expect("just pushed")
    }
}

impl Cell {
    pub fn text(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            ..Cell::default()
        }
    }

    /// A number shown as `text`, kept exact in `value`.
    pub fn number(value: f64, text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            value: Some(value),
            ..Cell::default()
        }
    }

    /// A bar of segments, with `text` beside it.
    pub fn bar(segments: Vec<Segment>, text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            bar: segments,
            ..Cell::default()
        }
    }

    pub fn tone(mut self, tone: Tone) -> Cell {
        self.tone = tone;
        self
    }
}

impl Segment {
    pub fn new(label: impl Into<String>, value: f64, color: &str) -> Segment {
        Segment {
            label: label.into(),
            value,
            color: color.into(),
        }
    }
}

impl ListEntry {
    pub fn new(text: impl Into<String>) -> ListEntry {
        ListEntry {
            text: text.into(),
            ..ListEntry::default()
        }
    }

    pub fn link(mut self, href: impl Into<String>) -> ListEntry {
        self.href = href.into();
        self
    }

    pub fn tone(mut self, tone: Tone) -> ListEntry {
        self.tone = tone;
        self
    }
}

impl Link {
    pub fn download(label: &str, href: impl Into<String>, file: impl Into<String>) -> Link {
        Link {
            label: label.into(),
            href: href.into(),
            download: file.into(),
        }
    }
}

/// A duration in seconds as a person reads it: `12.3 ms`, `4.56 s`, `7.5 min`.
pub fn seconds(s: f64) -> String {
    if !s.is_finite() {
        "–".into()
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1000.0)
    } else if s < 120.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} min", s / 60.0)
    }
}

/// A share (0–1) as a percentage with one decimal.
pub fn percent(share: f64) -> String {
    if share.is_finite() {
        format!("{:.1} %", share * 100.0)
    } else {
        "–".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panel_serialises_with_its_item_kinds() {
        let mut p = Panel::new("Serving");
        p.control("job", "job", vec![("a".into(), "a".into())], "a");
        p.text("summary", "3 models", Tone::Muted);
        let mut t = Table::new("models", "Models", &["model", "attainment"]).empty("no model yet");
        t.row(7, vec![Cell::text("7"), Cell::number(0.8, percent(0.8))]);
        p.table(t);
        let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["title"], "Serving");
        assert_eq!(v["controls"][0]["options"][0][1], "a");
        assert_eq!(v["items"][0]["kind"], "text");
        assert_eq!(v["items"][0]["tone"], "muted");
        assert_eq!(v["items"][1]["kind"], "table");
        assert_eq!(v["items"][1]["rows"][0]["key"], "7");
        assert_eq!(v["items"][1]["rows"][0]["cells"][1]["value"], 0.8);
        assert_eq!(v["items"][1]["rows"][0]["cells"][1]["text"], "80.0 %");
        assert!(v["items"][1]["rows"][0]["cells"][0].get("value").is_none());
    }

    #[test]
    fn durations_and_shares_read_as_people_write_them() {
        assert_eq!(seconds(0.0123), "12.3 ms");
        assert_eq!(seconds(4.561), "4.56 s");
        assert_eq!(seconds(450.0), "7.5 min");
        assert_eq!(percent(0.8), "80.0 %");
        assert_eq!(percent(f64::NAN), "–");
    }
}
