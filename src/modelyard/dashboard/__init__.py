"""The dashboard: a read-only page at ``/dashboard`` on the HTTP port (``--allow-dashboard``).

The HTTP frontend answers ``/dashboard/...`` (``frontends/http/dashboard.py``): the page (plain HTML, CSS and
JavaScript in ``static/``, shipped as package data, no build step, nothing from a CDN) and
its JSON under ``/dashboard/api/`` (``data.py``), which the page polls every two seconds.
"""
