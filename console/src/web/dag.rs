//! A task's dependency graph as SVG: the task, its parents and children (transitively, at most
//! [`MAX_NODES`] tasks), laid out by layout-rs and written here so every node is a link to its
//! task's page (layout-rs's own SVG writer cannot carry links) and every name is escaped.

use std::collections::{BTreeSet, VecDeque};

use layout::core::base::Orientation;
use layout::core::format::{ClipHandle, RenderBackend};
use layout::core::geometry::Point;
use layout::core::style::StyleAttr;
use layout::std_shapes::render::get_shape_size;
use layout::std_shapes::shapes::{Arrow, Element, ShapeKind};
use layout::topo::layout::VisualGraph;
use mthpt_engine::task::{Dependency, TaskId};

/// The most tasks one graph shows.
pub const MAX_NODES: usize = 50;
/// The longest name drawn in a node (the whole name is in the node's title).
const LABEL_CHARS: usize = 28;
/// Space around the drawing.
const MARGIN: f64 = 8.0;

/// The tasks around `root`: its ancestors and descendants, nearest first, at most `max`
/// (`root` first), the edges among them (parent, child), and whether some were left out.
pub fn around(
    deps: &[Dependency],
    root: TaskId,
    max: usize,
) -> (Vec<TaskId>, Vec<(TaskId, TaskId)>, bool) {
    let mut nodes = vec![root];
    let mut seen = BTreeSet::from([root]);
    let mut cut = false;
    // (task, walking up to parents?)
    let mut queue = VecDeque::from([(root, true), (root, false)]);
    while let Some((at, up)) = queue.pop_front() {
        for d in deps {
            let (from, next) = if up {
                (d.child_task_id, d.parent_task_id)
            } else {
                (d.parent_task_id, d.child_task_id)
            };
            if from != at || seen.contains(&next) {
                continue;
            }
            if nodes.len() >= max {
                cut = true;
                continue;
            }
            seen.insert(next);
            nodes.push(next);
            queue.push_back((next, up));
        }
    }
    let edges = deps
        .iter()
        .filter(|d| seen.contains(&d.parent_task_id) && seen.contains(&d.child_task_id))
        .map(|d| (d.parent_task_id, d.child_task_id))
        .collect();
    (nodes, edges, cut)
}

/// One task drawn in the graph.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub href: String,
    /// The task whose page shows the graph.
    pub current: bool,
}

/// Records what layout-rs draws: the boxes (by node index) and the edges' curves.
#[derive(Default)]
struct Recorder {
    boxes: Vec<(usize, Point, Point)>,
    curves: Vec<Vec<(Point, Point)>>,
}

impl RenderBackend for Recorder {
    fn draw_rect(
        &mut self,
        xy: Point,
        size: Point,
        _look: &StyleAttr,
        properties: Option<String>,
        _clip: Option<ClipHandle>,
    ) {
        if let Some(i) = properties.and_then(|p| p.parse().ok()) {
            self.boxes.push((i, xy, size));
        }
    }

    fn draw_line(&mut self, _: Point, _: Point, _: &StyleAttr, _: Option<String>) {}

    fn draw_circle(&mut self, _: Point, _: Point, _: &StyleAttr, _: Option<String>) {}

    fn draw_text(&mut self, _: Point, _: &str, _: &StyleAttr) {}

    fn draw_arrow(
        &mut self,
        path: &[(Point, Point)],
        _dashed: bool,
        _head: (bool, bool),
        _look: &StyleAttr,
        _properties: Option<String>,
        _text: &str,
    ) {
        if path.len() >= 2 {
            self.curves.push(path.to_vec());
        }
    }

    fn create_clip(&mut self, _: Point, _: Point, _: usize) -> ClipHandle {
        0
    }
}

/// Escapes text for SVG (element text and attribute values).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn label(name: &str) -> String {
    if name.chars().count() > LABEL_CHARS {
        let mut l: String = name.chars().take(LABEL_CHARS - 1).collect();
        l.push('…');
        l
    } else {
        name.to_owned()
    }
}

/// The graph of `nodes` and `edges` (indexes into `nodes`, parent → child) as an `<svg>`
/// element named `title`; every node a focusable link, the current one marked.
pub fn svg(nodes: &[Node], edges: &[(usize, usize)], title: &str) -> String {
    let dir = Orientation::TopToBottom;
    let mut vg = VisualGraph::new(dir);
    let look = StyleAttr::simple();
    let handles: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let shape = ShapeKind::new_box(&label(&n.name));
            let size = get_shape_size(dir, &shape, look.font_size, false);
            vg.add_node(Element::create_with_properties(
                shape,
                look.clone(),
                dir,
                size,
                i.to_string(),
            ))
        })
        .collect();
    for &(p, c) in edges {
        if let (Some(&from), Some(&to)) = (handles.get(p), handles.get(c)) {
            vg.add_edge(Arrow::simple(""), from, to);
        }
    }
    let mut rec = Recorder::default();
    // The layout asserts its own invariants; a graph it cannot lay out is shown as the list
    // of links only, never as a failed page.
    let laid_out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vg.do_it(false, false, false, &mut rec);
    }));
    if laid_out.is_err() {
        tracing::error!(
            nodes = nodes.len(),
            "the dependency graph could not be laid out"
        );
        return String::new();
    }

    let (mut min, mut max) = (Point::splat(f64::MAX), Point::splat(f64::MIN));
    let mut grow = |p: Point| {
        min = Point::new(min.x.min(p.x), min.y.min(p.y));
        max = Point::new(max.x.max(p.x), max.y.max(p.y));
    };
    for (_, xy, size) in &rec.boxes {
        grow(*xy);
        grow(xy.add(*size));
    }
    for c in &rec.curves {
        for (a, b) in c {
            grow(*a);
            grow(*b);
        }
    }
    if rec.boxes.is_empty() {
        return String::new();
    }
    let shift = Point::new(MARGIN - min.x, MARGIN - min.y);
    let (w, h) = (max.x - min.x + 2.0 * MARGIN, max.y - min.y + 2.0 * MARGIN);
    let at = |p: Point| p.add(shift);

    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"dag\" viewBox=\"0 0 {w:.0} {h:.0}\" \
         width=\"{w:.0}\" height=\"{h:.0}\" role=\"group\" aria-label=\"{t}\"><title>{t}</title>\
         <defs><marker id=\"dag-head\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
         markerWidth=\"8\" markerHeight=\"8\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\"/>\
         </marker></defs><g class=\"edges\">",
        t = escape(title)
    );
    for c in &rec.curves {
        let (a, b) = (at(c[0].0), at(c[0].1));
        let (d, e) = (at(c[1].0), at(c[1].1));
        let mut d_attr = format!(
            "M {:.1} {:.1} C {:.1} {:.1}, {:.1} {:.1}, {:.1} {:.1}",
            a.x, a.y, b.x, b.y, d.x, d.y, e.x, e.y
        );
        for (p, q) in c.iter().skip(2) {
            let (p, q) = (at(*p), at(*q));
            d_attr.push_str(&format!(" S {:.1} {:.1}, {:.1} {:.1}", p.x, p.y, q.x, q.y));
        }
        out.push_str(&format!(
            "<path d=\"{d_attr}\" marker-end=\"url(#dag-head)\"/>"
        ));
    }
    out.push_str("</g>");
    for (i, xy, size) in &rec.boxes {
        let Some(n) = nodes.get(*i) else { continue };
        let xy = at(*xy);
        out.push_str(&format!(
            "<a href=\"{href}\" class=\"node{cur}\"{aria}><title>{name}</title>\
             <rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{sw:.1}\" height=\"{sh:.1}\" rx=\"4\"/>\
             <text x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\" dominant-baseline=\"central\">{label}</text></a>",
            href = escape(&n.href),
            cur = if n.current { " current" } else { "" },
            aria = if n.current {
                " aria-current=\"page\""
            } else {
                ""
            },
            name = escape(&n.name),
            label = escape(&label(&n.name)),
            x = xy.x,
            y = xy.y,
            sw = size.x,
            sh = size.y,
            tx = xy.x + size.x / 2.0,
            ty = xy.y + size.y / 2.0,
        ));
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mthpt_engine::task::DependencyCondition;

    fn dep(p: i64, c: i64) -> Dependency {
        Dependency {
            tenant_id: mthpt_engine::tenant::TenantId(1),
            parent_task_id: TaskId(p),
            child_task_id: TaskId(c),
            condition: DependencyCondition::OnSuccess,
            created_at: 0,
        }
    }

    #[test]
    fn ancestors_and_descendants_are_kept_and_siblings_are_not() {
        // 1 → 2 → 3 → 4, and 1 → 5 (a sibling branch of 2's chain).
        let deps = [dep(1, 2), dep(2, 3), dep(3, 4), dep(1, 5)];
        let (nodes, edges, cut) = around(&deps, TaskId(3), MAX_NODES);
        let ids: BTreeSet<i64> = nodes.iter().map(|t| t.0).collect();
        assert_eq!(ids, BTreeSet::from([1, 2, 3, 4]));
        assert_eq!(nodes[0], TaskId(3));
        assert_eq!(edges.len(), 3);
        assert!(!cut);
    }

    #[test]
    fn a_large_graph_is_cut_and_says_so() {
        let deps: Vec<Dependency> = (2..100).map(|c| dep(1, c)).collect();
        let (nodes, _, cut) = around(&deps, TaskId(1), 10);
        assert_eq!(nodes.len(), 10);
        assert!(cut);
    }

    #[test]
    fn nodes_are_links_and_names_are_escaped() {
        let nodes = [
            Node {
                name: "<img src=x onerror=alert(1)>".to_owned(),
                href: "/t/a/tasks/1".to_owned(),
                current: false,
            },
            Node {
                name: "child".to_owned(),
                href: "/t/a/tasks/2".to_owned(),
                current: true,
            },
        ];
        let svg = svg(&nodes, &[(0, 1)], "Dependencies");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("<a href=\"/t/a/tasks/1\" class=\"node\">"));
        assert!(svg.contains("class=\"node current\""));
        assert!(svg.contains("&lt;img src=x onerror=alert(1)&gt;"));
        assert!(!svg.contains("<img"));
        assert!(svg.contains("marker-end"), "the edge is drawn");
    }
}
