"""The HTML report and the compare/trend pages: plotly figures from result objects, Jinja2 templates."""
