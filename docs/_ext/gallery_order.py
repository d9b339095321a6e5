"""The order of the examples gallery: from a first model to the comparisons, family by family.

``sphinx_gallery_conf["within_subsection_order"] = "gallery_order.GalleryOrder"`` (a class
named by string, so Sphinx can cache the configuration). Examples not listed come last, by
file name.
"""

ORDER = [
    "plot_digits_sbn.py",
    "plot_inpainting.py",
    "plot_bound_gap.py",
    "plot_compare_methods.py",
    "plot_diagnosis.py",
    "plot_diagnosis_methods.py",
    "plot_nlgbn_bars.py",
    "plot_context_hmm.py",
]


class GalleryOrder:
    """Sort key of sphinx-gallery's ``within_subsection_order``."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        return (ORDER.index(filename) if filename in ORDER else len(ORDER), filename)

    def __repr__(self):
        return "<GalleryOrder>"
