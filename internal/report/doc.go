// Package report turns runs into what people read: the side-by-side
// comparison table with bootstrap confidence intervals and a plain verdict
// (terminal), and one self-contained HTML file whose charts are inline SVG
// drawn here (no JavaScript, nothing fetched when viewed), with the same
// charts as PNG for slides. Chart data is computed once (Charts) and drawn
// by two back ends from the same layout code, so the SVG and the PNG agree.
package report
