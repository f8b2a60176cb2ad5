"""`agent report`: one self-contained HTML page of a run (`page.write_report`), its turns and diffs
(`turns`), its SVG charts (`charts`), and its style and script (`assets`)."""
