"""The reports: their types (the schema in code), the builders that fill them from a simulation or
a serving run, the generated schema doc, and the renderers (terminal, Markdown, JSON)."""
