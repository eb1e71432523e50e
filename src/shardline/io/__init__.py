"""Input/output edges: spreadsheets (.csv, .xlsx) in and out, live-formula templates.

The core (roofline, cost, ...) never imports from here; these modules parse files into typed
values, call the core, and write results. openpyxl is imported only inside the functions that
need it.
"""
