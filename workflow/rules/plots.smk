# Stage 4 (figures) is filled in by the plotting issue; no placeholder writes fake figures.
