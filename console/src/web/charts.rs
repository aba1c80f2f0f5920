//! Charts drawn on the server as SVG (plotters' SVG backend, no fonts: text is SVG `<text>`),
//! inlined in the pages so they show without JavaScript.
//!
//! Every chart is an image to assistive technology (`role="img"`, an `aria-label` and a
//! `<title>`), its text is escaped (plotters escapes what it writes; the title is escaped here),
//! axes and text are drawn in `currentColor` so they follow the page's theme, and each series
//! carries a class `series-{class}` the style sheet can colour.

use chrono::TimeZone;
use chrono_tz::Tz;
use plotters::prelude::*;

/// One line of a chart: its legend label, the CSS class of its colour and its points
/// (instant in epoch ms, value; `None` leaves a gap).
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    /// `[a-z0-9_-]`; anything else is dropped.
    pub class: String,
    pub points: Vec<(i64, Option<f64>)>,
}

/// What a time chart shows.
#[derive(Debug, Clone)]
pub struct TimeChart<'a> {
    /// The chart's accessible name (also its SVG `<title>`).
    pub title: &'a str,
    /// The description of the vertical axis.
    pub y_label: &'a str,
    pub from_ms: i64,
    pub to_ms: i64,
    /// The zone the time axis is written in.
    pub tz: Tz,
    /// The top of the vertical axis; `None`: a little above the highest value.
    pub y_max: Option<f64>,
}

/// Width and height of a chart, in SVG units (it scales with the page: on a phone about
/// 0.6 of this, so the text stays readable).
pub const SIZE: (u32, u32) = (600, 260);

/// The colours of the series, in order, for readers that do not apply the style sheet; the
/// page's CSS overrides them per class (mid tones, readable on light and dark backgrounds).
const PALETTE: [RGBColor; 6] = [
    RGBColor(0x2e, 0x9e, 0x5b),
    RGBColor(0xd9, 0x4a, 0x3d),
    RGBColor(0xd1, 0x8f, 0x1c),
    RGBColor(0x4a, 0x7d, 0xdb),
    RGBColor(0x8e, 0x6b, 0xc9),
    RGBColor(0x7f, 0x87, 0x91),
];

/// The colour plotters is asked for where the page's text colour is meant; replaced by
/// `currentColor` in the output.
const INK: RGBColor = RGBColor(0x01, 0x02, 0x03);

/// A line chart of `series` over `from_ms..to_ms`, as an inline `<svg>` element. A chart
/// that cannot be drawn is an empty string (and a logged error).
pub fn time_series(chart: &TimeChart<'_>, series: &[Series]) -> String {
    match draw(chart, series) {
        Ok(svg) => finish(svg, chart.title, series),
        Err(e) => {
            tracing::error!(error = %e, title = chart.title, "a chart could not be drawn");
            String::new()
        }
    }
}

fn draw(c: &TimeChart<'_>, series: &[Series]) -> Result<String, String> {
    let to = c.to_ms.max(c.from_ms + 1);
    let highest = series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|(_, v)| *v))
        .fold(0.0_f64, f64::max);
    let y_max = c
        .y_max
        .unwrap_or(if highest <= 0.0 { 1.0 } else { highest * 1.1 });
    let span = to - c.from_ms;
    let tz = c.tz;
    let x_format = move |ms: &i64| axis_time(*ms, tz, span);
    let y_format = |v: &f64| short_number(*v);
    let ink = |size: u32| ("sans-serif", size).into_font().color(&INK);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(26)
            .y_label_area_size(58)
            .build_cartesian_2d(c.from_ms..to, 0.0..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_labels(6)
            .y_labels(5)
            .x_label_formatter(&x_format)
            .y_label_formatter(&y_format)
            .y_desc(c.y_label)
            .axis_style(INK.mix(0.6))
            .bold_line_style(INK.mix(0.12))
            .light_line_style(TRANSPARENT)
            .label_style(ink(15))
            .axis_desc_style(ink(15))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let style = color.stroke_width(2);
            let mut labelled = false;
            for segment in segments(&s.points) {
                let drawn = if segment.len() == 1 {
                    chart
                        .draw_series(segment.iter().map(|p| Circle::new(*p, 3, color.filled())))
                        .map_err(|e| e.to_string())?
                } else {
                    chart
                        .draw_series(LineSeries::new(segment, style))
                        .map_err(|e| e.to_string())?
                };
                if !labelled {
                    labelled = true;
                    drawn.label(s.label.as_str()).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(3))
                    });
                }
            }
            if !labelled {
                chart
                    .draw_series(LineSeries::new(std::iter::empty(), style))
                    .map_err(|e| e.to_string())?
                    .label(s.label.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(3))
                    });
            }
        }
        if !series.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(TRANSPARENT)
                .border_style(INK.mix(0.25))
                .label_font(ink(14))
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The runs of consecutive defined points.
fn segments(points: &[(i64, Option<f64>)]) -> Vec<Vec<(i64, f64)>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    for (x, y) in points {
        match y {
            Some(y) => current.push((*x, *y)),
            None if !current.is_empty() => out.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The drawn SVG made accessible and themable: a role, a name and a title, the text colour
/// as `currentColor`, each series' colour tagged with its class.
fn finish(svg: String, title: &str, series: &[Series]) -> String {
    let title = escape(title);
    let mut svg = svg.replace(&hex(INK), "currentColor");
    for (i, s) in series.iter().enumerate() {
        let class: String = s
            .class
            .chars()
            .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || *c == '-')
            .collect();
        let color = hex(PALETTE[i % PALETTE.len()]);
        // The first series of a colour owns it (the palette repeats after six series).
        if i < PALETTE.len() {
            for attr in ["stroke", "fill"] {
                svg = svg.replace(
                    &format!("{attr}=\"{color}\""),
                    &format!("{attr}=\"{color}\" class=\"series-{class}\""),
                );
            }
        }
    }
    svg.replacen(
        "<svg ",
        &format!("<svg class=\"chart\" role=\"img\" aria-label=\"{title}\" "),
        1,
    )
    .replacen(
        "xmlns=\"http://www.w3.org/2000/svg\">",
        &format!("xmlns=\"http://www.w3.org/2000/svg\">\n<title>{title}</title>"),
        1,
    )
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// Text escaped for SVG (XML) content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An axis label for `ms` in `tz`: the time of day on charts of up to two days, else the date
/// (and the hour on charts of up to ten days).
fn axis_time(ms: i64, tz: Tz, span_ms: i64) -> String {
    const DAY: i64 = 24 * 3600 * 1000;
    let Some(t) = tz.timestamp_millis_opt(ms).single() else {
        return String::new();
    };
    if span_ms <= 2 * DAY {
        t.format("%H:%M").to_string()
    } else if span_ms <= 10 * DAY {
        t.format("%m-%d %H:%M").to_string()
    } else {
        t.format("%Y-%m-%d").to_string()
    }
}

/// A value for an axis: whole numbers as such, thousands as `12k`, else one decimal.
fn short_number(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn chart(title: &str) -> TimeChart<'_> {
        TimeChart {
            title,
            y_label: "runs",
            from_ms: 0,
            to_ms: 60 * MIN,
            tz: chrono_tz::Asia::Shanghai,
            y_max: None,
        }
    }

    #[test]
    fn a_chart_is_a_named_image_with_escaped_text() {
        let hostile = "<img src=x onerror=alert(1)>";
        let series = [Series {
            label: hostile.to_owned(),
            class: "succ\"eeded".to_owned(),
            points: (0..60).map(|i| (i * MIN, Some(i as f64))).collect(),
        }];
        let svg = time_series(&chart(hostile), &series);
        assert!(svg.starts_with("<svg class=\"chart\" role=\"img\" aria-label=\"&lt;img"));
        assert!(svg.contains("<title>&lt;img src=x onerror=alert(1)&gt;</title>"));
        assert!(!svg.contains("<img"), "no markup from labels: {svg}");
        assert!(svg.contains("class=\"series-succeeded\""), "{svg}");
        assert!(svg.contains("currentColor") && !svg.contains("#010203"));
        assert!(svg.contains("<polyline"), "the line is drawn");
    }

    #[test]
    fn the_time_axis_is_in_the_given_zone() {
        let svg = time_series(&chart("t"), &[]);
        // 1970-01-01 00:00 UTC is 08:00 in Shanghai.
        assert!(svg.contains(">\n08:"), "{svg}");
    }

    #[test]
    fn gaps_split_a_line_and_lone_points_show() {
        let pts = [
            (0, Some(1.0)),
            (1, Some(2.0)),
            (2, None),
            (3, Some(3.0)),
            (4, None),
        ];
        assert_eq!(
            segments(&pts),
            vec![vec![(0, 1.0), (1, 2.0)], vec![(3, 3.0)]]
        );
        let svg = time_series(
            &chart("t"),
            &[Series {
                label: "p99".to_owned(),
                class: "lateness".to_owned(),
                points: vec![(5 * MIN, Some(4.0))],
            }],
        );
        assert!(svg.contains("<circle"), "{svg}");
    }

    #[test]
    fn axis_numbers_are_short() {
        assert_eq!(short_number(3.0), "3");
        assert_eq!(short_number(2.5), "2.5");
        assert_eq!(short_number(25_000.0), "25k");
    }
}
