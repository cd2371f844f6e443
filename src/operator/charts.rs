//! Small inline SVG bar charts (no script, no fonts fetched).

use maud::{Markup, html};

/// A bar chart of `values` (oldest first) titled `title`, labelled
/// `first` and `last` under its ends, its largest value written at the top.
pub(super) fn bars(title: &str, values: &[i64], first: &str, last: &str) -> Markup {
    const W: f64 = 600.0;
    const H: f64 = 120.0;
    let most = values.iter().copied().max().unwrap_or(0);
    let top = most.max(1);
    let n = values.len().max(1) as f64;
    let step = W / n;
    let width = (step - 1.0).max(1.0);
    html! {
        figure.chart {
            figcaption { (title) " — most " (most) }
            svg viewBox=(format!("0 0 {W} {}", H + 16.0)) role="img" aria-label=(title) {
                line x1="0" y1=(H) x2=(W) y2=(H) stroke="#999" {}
                @for (i, v) in values.iter().enumerate() {
                    @let h = (*v as f64 / top as f64) * (H - 4.0);
                    rect x=(format!("{:.1}", i as f64 * step)) y=(format!("{:.1}", H - h))
                        width=(format!("{width:.1}")) height=(format!("{h:.1}")) fill="#3b6ea5" {
                        title { (v) }
                    }
                }
                text x="0" y=(H + 13.0) font-size="11" fill="#555" { (first) }
                text x=(W) y=(H + 13.0) font-size="11" fill="#555" text-anchor="end" { (last) }
            }
        }
    }
}
