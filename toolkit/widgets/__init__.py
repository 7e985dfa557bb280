"""Interactive widgets for the course notebooks, one module per topic.

Each module offers pure plotting functions that return a ``matplotlib.figure.Figure``
(so tests can render them headless with the Agg backend) and builder functions that
return an ``ipywidgets`` widget wiring those plots to sliders and selectors. Nothing
here needs a network connection.

When the environment variable ``TOOLKIT_HEADLESS=1`` is set (the autograder sets it
while executing notebooks), builders return a small placeholder instead of drawing.
"""
