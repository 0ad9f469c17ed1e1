//! Drawing `rtgt top`'s screen (ratatui): a status line, the view's table, a key help line.
//! ASCII, reverse video and one colour only, so that it reads the same over SSH and in tmux
//! whatever the locale (the sort column's header is marked `*`, as in batch mode).

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell as TuiCell, Paragraph, Row, Table as TuiTable};

use super::table::{Cell, Column, Table, View};

/// What the status line says.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// The server, as the user gave it.
    pub endpoint: String,
    /// Samples read so far.
    pub samples: u64,
    /// When the last one was read (UTC, HH:MM:SS).
    pub at: String,
    /// Seconds between samples.
    pub interval: f64,
    /// The last failure, if the last attempt failed.
    pub error: Option<String>,
}

/// Widest a text column other than the last gets; longer names are cut on screen.
const MAX_TEXT_WIDTH: usize = 48;

fn width_of(col: &Column, table: &Table, i: usize, sorted: bool) -> u16 {
    let header = col.title.chars().count() + usize::from(sorted);
    let cells = table
        .rows
        .iter()
        .filter_map(|r| r.get(i))
        .map(|c| c.render().chars().count())
        .max()
        .unwrap_or(0);
    let w = header.max(cells);
    let w = if col.numeric {
        w.max(6)
    } else {
        w.min(MAX_TEXT_WIDTH)
    };
    u16::try_from(w).unwrap_or(u16::MAX)
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, table: &Table, sort: usize, status: &Status) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    let tabs: Vec<Span> = View::ALL
        .iter()
        .flat_map(|&v| {
            let style = if v == table.view {
                Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD)
            } else {
                Style::default()
            };
            [
                Span::styled(format!(" {} ", v.title()), style),
                Span::raw(" "),
            ]
        })
        .collect();
    // The tabs first, the socket path (long, least needed) last, for narrow terminals.
    let mut first = vec![Span::styled(
        "rtgt top  ",
        Style::default().add_modifier(Modifier::BOLD),
    )];
    first.extend(tabs);
    first.push(Span::raw(format!(
        "  sample {}  at {}  every {}s  {}",
        status.samples, status.at, status.interval, status.endpoint
    )));
    let second = match &status.error {
        Some(e) => Line::from(Span::styled(
            format!("error: {e} (retrying)"),
            Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        )),
        None => Line::raw(""),
    };
    frame.render_widget(Paragraph::new(vec![Line::from(first), second]), head);

    let columns = table.view.columns();
    let header = Row::new(columns.iter().enumerate().map(|(i, c)| {
        let title = if i == sort {
            format!("{}*", c.title)
        } else {
            c.title.to_string()
        };
        let line = if c.numeric {
            Line::from(title).right_aligned()
        } else {
            Line::from(title)
        };
        let style = if i == sort {
            Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else {
            Style::default().add_modifier(Modifier::BOLD)
        };
        TuiCell::from(line).style(style)
    }));
    let rows = table.rows.iter().map(|r| {
        Row::new(r.iter().zip(columns).map(|(cell, c)| {
            let s = cell.render();
            match cell {
                Cell::Num(_) if c.numeric => TuiCell::from(Line::from(s).right_aligned()),
                _ => TuiCell::from(s),
            }
        }))
    });
    // The last column (host NQNs, thread names) gets what is left.
    let widths: Vec<Constraint> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| match i + 1 == columns.len() && !c.numeric {
            true => Constraint::Fill(1),
            false => Constraint::Length(width_of(c, table, i, i == sort)),
        })
        .collect();
    let empty = table.rows.is_empty();
    frame.render_widget(
        TuiTable::new(rows, widths).header(header).column_spacing(2),
        body,
    );
    if empty {
        let [_, msg] = Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(body);
        let what = match table.view {
            View::Namespaces => "no bdevs",
            View::Subsystems => "no subsystems",
            View::Reactors => "no reactors",
        };
        frame.render_widget(Paragraph::new(format!("({what})")), msg);
    }

    frame.render_widget(
        Paragraph::new(Line::from(
            "q quit   Tab/1-3 view   s/Right next sort column   S/Left previous   +/- interval",
        ))
        .style(Style::default().add_modifier(Modifier::DIM)),
        foot,
    );
}
