"""``cluster up --plugin-chart``: another vendor's chart, checked before anything is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.cluster import driverchart
from fakegpu.deploy import chart_dir
from fakegpu.errors import InvalidInput


def test_a_chart_directory_values_and_images_become_a_driver_chart(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("a: 1\n")
    chart = driverchart.parse(str(chart_dir()), driver="gpu.example.com", values=[values],
                              images=["example.com/d:v1"])
    assert chart.chart == str(chart_dir().resolve()) and chart.values == (str(values),)
    assert driverchart.DriverChart.from_json(chart.to_json()) == chart
    oci = driverchart.parse("oci://ghcr.io/example/charts/driver", driver="gpu.example.com")
    assert oci.chart == "oci://ghcr.io/example/charts/driver"


@pytest.mark.parametrize(("chart", "driver", "values", "images", "match"), [
    ("CHART", None, [], [], r"--plugin-chart: give --plugin-driver NAME"),
    ("CHART", "Not_A_Name", [], [], r"--plugin-driver 'Not_A_Name': expected a DRA driver name"),
    ("CHART", "gpu", [], [], r"--plugin-driver 'gpu': expected a DRA driver name"),
    ("/nonexistent", "gpu.example.com", [], [], r"--plugin-chart /nonexistent: expected a "
                                                r"chart directory"),
    ("CHART", "gpu.example.com", ["/nonexistent.yaml"], [], r"--plugin-values "
                                                              r"/nonexistent.yaml: no such file"),
    ("CHART", "gpu.example.com", [], ["bad image"], r"--plugin-image 'bad image'"),
])
def test_bad_input_names_the_flag(chart: str, driver: str | None, values: list[str],
                                  images: list[str], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        driverchart.parse(str(chart_dir()) if chart == "CHART" else chart, driver=driver,
                          values=[Path(v) for v in values], images=images)
