"""Documents, workbooks, archives and URLs uploaded as tables (`PUT /api/files/{name}`), as
MindsDB's editor and users' scripts send them: text, Markdown, HTML, PDF and Word files become
rows of their text's chunks (`content`, `metadata`), an .xlsx or .xls sheet a typed table, a zip archive
the one file it holds; `{"source_type": "url", "source": …}` fetches the file through the
egress policy. Every file here is made by the test."""

from __future__ import annotations

import datetime
import http.server
import io
import json
import threading
import zipfile
import zlib

import pytest
import requests

from hosted import hosted_server, problem


def files_url(server, name: str) -> str:
    return f"{server.url}/api/files/{name}"


def upload(server, name: str, file_name: str, body: bytes) -> requests.Response:
    return requests.put(files_url(server, name), timeout=30,
                        files={"file": (file_name, body, "application/octet-stream")})


def pdf(pages: list[list[str]]) -> bytes:
    """A PDF of `pages` of lines in Helvetica, each page's content deflated."""
    objects: list[bytes] = []
    kids = []
    font, resources = 3, 4
    for i, lines in enumerate(pages):
        shown = b"".join(b"(" + line.encode("latin-1") + b") Tj 0 -14 Td " for line in lines)
        content = zlib.compress(b"BT /F1 12 Tf 72 720 Td " + shown + b"ET")
        content_id, page_id = 5 + 2 * i, 6 + 2 * i
        kids.append(page_id)
        objects.append(b"%d 0 obj << /Length %d /Filter /FlateDecode >> stream\n" % (content_id, len(content))
                       + content + b"\nendstream endobj\n")
        objects.append(b"%d 0 obj << /Type /Page /Parent 2 0 R /Contents %d 0 R /Resources %d 0 R "
                       b"/MediaBox [0 0 612 792] >> endobj\n" % (page_id, content_id, resources))
    head = [
        b"1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n",
        b"2 0 obj << /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids)
        + b"] /Count %d >> endobj\n" % len(kids),
        b"3 0 obj << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> endobj\n",
        b"4 0 obj << /Font << /F1 3 0 R >> >> endobj\n",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for obj in head + objects:
        offsets.append(len(out))
        out += obj
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(offsets) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer << /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(offsets) + 1, xref)
    return bytes(out)


def docx(paragraphs: list[str]) -> bytes:
    body = "".join(f'<w:p><w:r><w:t xml:space="preserve">{p.replace("&", "&amp;")}</w:t></w:r></w:p>'
                   for p in paragraphs)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/content-types"/>')
        z.writestr("word/document.xml", '<?xml version="1.0"?><w:document xmlns:w="http://schemas.'
                   f'openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>')
    return buffer.getvalue()


def xlsx(rows: list[list[object]], sheets: tuple[str, ...] = ("Sheet1",)) -> bytes:
    """A workbook whose sheets all hold `rows`: numbers as numbers, text as inline strings."""
    return book({name: rows for name in sheets})


def book(sheets: dict[str, list[list[object]]]) -> bytes:
    """A workbook of these sheets, in this order."""
    def cell(ref: str, value: object) -> str:
        if isinstance(value, bool):
            return f'<c r="{ref}" t="b"><v>{int(value)}</v></c>'
        if isinstance(value, (int, float)):
            return f'<c r="{ref}"><v>{value}</v></c>'
        return f'<c r="{ref}" t="inlineStr"><is><t>{value}</t></is></c>'
    def sheet(rows: list[list[object]]) -> str:
        return "".join(
            f'<row r="{r + 1}">' + "".join(cell(f"{chr(65 + c)}{r + 1}", v) for c, v in enumerate(row)
                                            if v is not None) + "</row>"
            for r, row in enumerate(rows))
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/content-types"/>')
        z.writestr("_rels/.rels", '<?xml version="1.0"?><Relationships xmlns="http://schemas.'
                   f'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" '
                   f'Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>')
        z.writestr("xl/workbook.xml", f'<?xml version="1.0"?><workbook {ns} xmlns:r="{rel}"><sheets>'
                   + "".join(f'<sheet name="{s}" sheetId="{i + 1}" r:id="rId{i + 1}"/>'
                             for i, s in enumerate(sheets)) + "</sheets></workbook>")
        z.writestr("xl/_rels/workbook.xml.rels", '<?xml version="1.0"?><Relationships xmlns="http://'
                   'schemas.openxmlformats.org/package/2006/relationships">'
                   + "".join(f'<Relationship Id="rId{i + 1}" Type="{rel}/worksheet" '
                             f'Target="worksheets/sheet{i + 1}.xml"/>' for i in range(len(sheets)))
                   + "</Relationships>")
        for i, rows in enumerate(sheets.values()):
            z.writestr(f"xl/worksheets/sheet{i + 1}.xml",
                       f'<?xml version="1.0"?><worksheet {ns}><sheetData>{sheet(rows)}</sheetData></worksheet>')
    return buffer.getvalue()


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return buffer.getvalue()


LONG = " ".join(f"Sentence number {i} tells the story of mindlite." for i in range(40))


def test_documents_become_rows_of_their_text(server):
    made = {
        "notes": ("notes.txt", LONG.encode()),
        "readme": ("README.md", b"# Mindlite\n\nAn *embeddable* engine.\n"),
        "page": ("page.html", b"<html><head><title>t</title><script>var x='<b>no</b>'</script></head>"
                              b"<body><h1>Fish &amp; chips</h1><p>Served hot</p></body></html>"),
        "report": ("report.pdf", pdf([["Quarterly report", "Sales rose"], ["Page two: costs fell"]])),
        "letter": ("letter.docx", docx(["Dear reader & friend", "Goodbye"])),
    }
    for name, (file_name, body) in made.items():
        r = upload(server, name, file_name, body)
        assert r.status_code == 200, (name, r.text)
    listed = {f["name"]: f["columns"] for f in requests.get(f"{server.url}/api/files", timeout=10).json()}
    assert all(listed[name] == ["content", "metadata"] for name in made), listed
    notes = server.sql_ok("SELECT content, metadata FROM files.notes")["data"]
    assert len(notes) > 2 and all(len(c) <= 500 for c, _ in notes)
    assert json.loads(notes[0][1]) == {"source_file": "notes.txt", "file_format": "txt"}
    assert server.sql_ok("SELECT content FROM files.readme")["data"] == [["# Mindlite\n\nAn *embeddable* engine."]]
    assert server.sql_ok("SELECT content FROM files.page")["data"] == [["Fish & chips\nServed hot"]]
    report = server.sql_ok("SELECT content, metadata FROM files.report")["data"]
    assert "Quarterly report" in report[0][0] and "Page two: costs fell" in report[0][0], report
    assert json.loads(report[0][1])["file_format"] == "pdf"
    assert server.sql_ok("SELECT content FROM files.letter")["data"] == [["Dear reader & friend\nGoodbye"]]
    # A raw body is told by its media type, or its first bytes.
    raw = requests.put(files_url(server, "raw_pdf"), data=made["report"][1], timeout=30,
                       headers={"Content-Type": "application/octet-stream"})
    assert raw.status_code == 200, raw.text
    plain = requests.put(files_url(server, "raw_text"), data=b"just words", timeout=30,
                         headers={"Content-Type": "text/plain"})
    assert plain.status_code == 200, plain.text
    assert server.sql_ok("SELECT content FROM files.raw_text")["data"] == [["just words"]]


def test_a_sheet_becomes_a_typed_table_and_an_archive_its_one_file(server):
    book = xlsx([["id", "price", "name", "in_stock"], [1, 2.5, "apple", True], [2, 3, "pear", False]])
    assert upload(server, "prices", "prices.xlsx", book).status_code == 200
    got = server.sql_ok("SELECT id, price, name, in_stock, arrow_typeof(id), arrow_typeof(price) "
                        "FROM files.prices ORDER BY id")["data"]
    assert got == [[1, 2.5, "apple", True, "Int64", "Float64"], [2, 3.0, "pear", False, "Int64", "Float64"]]
    archive = zipped({"export/": b"", "export/data.csv": b"a,b\n1,x\n2,y\n"})
    assert upload(server, "from_zip", "data.zip", archive).status_code == 200
    assert server.sql_ok("SELECT a, b FROM files.from_zip ORDER BY a")["data"] == [[1, "x"], [2, "y"]]
    several = upload(server, "several", "two.zip", zipped({"a.csv": b"a\n1\n", "b.csv": b"a\n2\n"}))
    problem(several, 400, "only one data file")


def test_a_workbook_of_several_sheets_lists_them_and_each_sheet_is_a_table(server):
    sheets = {"First": [["a", "b"], [1, "x"], [2, "y"]], "Sales 2024": [["region", "total"], ["north", 2.5]],
              "Äpfel": [["kg"], [3]]}
    assert upload(server, "book", "book.xlsx", book(sheets)).status_code == 200
    listed = [f for f in requests.get(f"{server.url}/api/files", timeout=10).json() if f["name"] == "book"]
    assert listed == [{"name": "book", "row_count": 3, "columns": ["Tables"]}], listed
    # As MindsDB: the file lists its sheets; files.<file>.<sheet> reads one.
    assert server.sql_ok("SELECT * FROM files.book")["data"] == [["First"], ["Sales 2024"], ["Äpfel"]]
    assert server.sql_ok("SELECT a, b FROM files.book.First ORDER BY a")["data"] == [[1, "x"], [2, "y"]]
    assert server.sql_ok("SELECT kg FROM files.book.Äpfel")["data"] == [[3]]
    assert server.sql_ok("SELECT a FROM files.book.first ORDER BY a")["data"] == [[1], [2]]
    assert server.sql_ok("SELECT region, total FROM files.book.`Sales 2024`")["data"] == [["north", 2.5]]
    joined = server.sql_ok("SELECT f.b, s.region FROM files.book.First f "
                           "CROSS JOIN files.book.`Sales 2024` s ORDER BY f.b")["data"]
    assert joined == [["x", "north"], ["y", "north"]]
    missing = server.sql("SELECT * FROM files.book.nope").json()
    assert missing["type"] == "error" and "Sheet 'nope' not found" in missing["error_message"], missing
    assert "First, Sales 2024, Äpfel" in missing["error_message"], missing
    assert upload(server, "single", "s.xlsx", xlsx([["a"], [1]])).status_code == 200
    plain = server.sql("SELECT * FROM files.single.Sheet1").json()
    assert plain["type"] == "error" and "not a workbook of several sheets" in plain["error_message"], plain
    # The sheets are no tables of their own in listings.
    tables = [row[0] for row in server.sql_ok("SHOW TABLES FROM files")["data"]]
    assert "book" in tables and not any(t.startswith("sheet_") for t in tables), tables
    # Deleting or dropping the file takes its sheets: the name is free again, whole.
    assert requests.delete(files_url(server, "book"), timeout=10).status_code == 200
    gone = server.sql("SELECT * FROM files.book.First").json()
    assert gone["type"] == "error", gone
    again = {"Other": [["c"], [3]], "More": [["d"], [4]]}
    assert upload(server, "book", "book.xlsx", book(again)).status_code == 200
    assert server.sql_ok("SELECT c FROM files.book.Other")["data"] == [[3]]
    assert server.sql("SELECT * FROM files.book.First").json()["type"] == "error"
    server.sql_ok("DROP TABLE files.book")
    assert upload(server, "book", "book.xlsx", book(sheets)).status_code == 200
    assert server.sql_ok("SELECT * FROM files.book")["data"] == [["First"], ["Sales 2024"], ["Äpfel"]]


def test_empty_sheets_are_listed_and_sheet_names_must_differ(server):
    sheets = {"Data": [["a"], [1]], "Sheet2": [], "Sheet3": []}
    assert upload(server, "mostly_empty", "m.xlsx", book(sheets)).status_code == 200
    assert server.sql_ok("SELECT * FROM files.mostly_empty")["data"] == [["Data"], ["Sheet2"], ["Sheet3"]]
    assert server.sql_ok("SELECT a FROM files.mostly_empty.Data")["data"] == [[1]]
    empty = server.sql("SELECT * FROM files.mostly_empty.Sheet2").json()
    assert empty["type"] == "error" and "Sheet 'Sheet2' of file 'mostly_empty' is empty" in empty["error_message"]
    problem(upload(server, "twice", "t.xlsx", book({"A": [["a"], [1]], "a": [["b"], [2]]})),
            400, "two sheets named 'a'")
    # Sheets sharing one worksheet part would read it once per sheet: refused.
    shared = book({"A": [["a"], [1]], "B": [["a"], [2]]})
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(shared)) as src, zipfile.ZipFile(buffer, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "xl/_rels/workbook.xml.rels":
                data = data.replace(b"worksheets/sheet2.xml", b"worksheets/sheet1.xml")
            dst.writestr(item, data)
    problem(upload(server, "shared", "s.xlsx", buffer.getvalue()), 400, "share one worksheet part")
    nothing = server.sql("SELECT * FROM files.nosuch.x").json()
    assert nothing["type"] == "error" and "Table 'nosuch' not found in database: files" in nothing["error_message"]


def test_the_caps_hold_for_all_the_sheets_of_a_workbook_together(start_server):
    server = start_server("[files]\nmax_rows = 100\n")
    rows = [["n"]] + [[i] for i in range(60)]
    assert upload(server, "one", "one.xlsx", xlsx(rows)).status_code == 200
    problem(upload(server, "two", "two.xlsx", xlsx(rows, sheets=("A", "B"))), 400,
            "more than 100 rows", "files.max_rows")
    assert [f["name"] for f in requests.get(f"{server.url}/api/files", timeout=10).json()] == ["one"]
    assert server.sql("SELECT * FROM files.two.A").json()["type"] == "error"


def test_an_archive_bomb_is_refused_within_the_caps(start_server):
    server = start_server("[files]\nmax_decoded_mb = 1\n")
    bomb = zipped({"big.csv": b"a\n" + b"1\n" * (2 << 20)})
    assert len(bomb) < 50_000, "a small archive that inflates past the 1 MiB cap"
    problem(upload(server, "bomb", "bomb.zip", bomb), 400, "files.max_decoded_mb")
    sheet_bomb = xlsx([["a"]] + [[i] for i in range(60_000)])
    problem(upload(server, "sheet", "s.xlsx", sheet_bomb), 400, "files.max_decoded_mb")
    assert requests.get(f"{server.url}/api/files", timeout=10).json() == []


def xls(sheets: dict[str, list[list[object]]]) -> bytes:
    """An Excel 97-2003 workbook, written by xlwt (the writer pandas used for `.xls`)."""
    import xlwt

    workbook = xlwt.Workbook()
    dates = xlwt.easyxf(num_format_str="yyyy-mm-dd hh:mm:ss")
    for name, rows in sheets.items():
        sheet = workbook.add_sheet(name)
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                if value is None:
                    continue
                if isinstance(value, datetime.datetime):
                    sheet.write(r, c, value, dates)
                else:
                    sheet.write(r, c, value)
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


@pytest.mark.filterwarnings("ignore:The xlrd engine is deprecated")
def test_an_xls_workbook_reads_as_pandas_reads_it(server):
    import pandas as pd

    rows = [["id", "name", "price", "ok", "at", None, "mixed"],
            [1, "apple", 1.5, True, datetime.datetime(2024, 1, 2, 3, 4, 5), "x", 7],
            [2, "pear", 2, False, None, None, "seven"],
            [3, None, 3.25, True, datetime.datetime(1999, 12, 31), "z", 8]]
    body = xls({"Prices": rows})
    assert upload(server, "old_prices", "prices.xls", body).status_code == 200
    got = server.sql_ok("SELECT * FROM files.old_prices ORDER BY id")
    # MindsDB reads an .xls with pandas; the same bytes, the same table.
    frame = pd.read_excel(io.BytesIO(body), engine="xlrd")
    assert got["column_names"] == list(frame.columns) == ["id", "name", "price", "ok", "at", "Unnamed: 5", "mixed"]
    # A column of numbers and text is text, as MindsDB stores pandas' mixed column.
    frame["mixed"] = frame["mixed"].astype(str)
    want = [[None if pd.isna(v) else (v.strftime("%Y-%m-%d %H:%M:%S.%f") if isinstance(v, pd.Timestamp) else v)
             for v in row] for row in frame.itertuples(index=False)]
    assert got["data"] == want, (got["data"], want)
    types = server.sql_ok("SELECT arrow_typeof(id), arrow_typeof(price), arrow_typeof(ok), "
                          "arrow_typeof(at), arrow_typeof(mixed) FROM files.old_prices LIMIT 1")["data"]
    assert types == [["Int64", "Float64", "Boolean", "Timestamp(µs)", "Utf8View"]], types
    # Several sheets: listed, each a table, as an .xlsx workbook's.
    body = xls({"First": [["a"], [1], [2]], "Sales 2024": [["region"], ["north"]], "Empty": []})
    r = requests.put(files_url(server, "old_book"), timeout=30,
                     files={"file": ("book", body, "application/vnd.ms-excel")})
    assert r.status_code == 200, r.text
    assert server.sql_ok("SELECT * FROM files.old_book")["data"] == [["First"], ["Sales 2024"], ["Empty"]]
    assert server.sql_ok("SELECT region FROM files.old_book.`sales 2024`")["data"] == [["north"]]
    empty = server.sql("SELECT * FROM files.old_book.Empty").json()
    assert empty["type"] == "error" and "is empty" in empty["error_message"], empty
    problem(upload(server, "doc", "letter.doc", body), 400, "'.doc' files cannot be uploaded")
    problem(upload(server, "fake", "fake.xls", b"id,name\n1,x\n"), 400, "not a readable .xls workbook")


def test_xls_dates_out_of_range_are_numbers_and_durations_their_text(start_server):
    """Read on a server whose statements may use 128 MiB: the reader's child process is sized
    by the file, not by the most a reader could want, so small workbooks and PDFs fit."""
    import xlwt

    server = start_server("[query]\nstatement_memory_mb = 128\n")
    book = xlwt.Workbook()
    sheet = book.add_sheet("S")
    date, took = xlwt.easyxf(num_format_str="yyyy-mm-dd"), xlwt.easyxf(num_format_str="[h]:mm:ss")
    for column, name in enumerate(["day", "late", "took"]):
        sheet.write(0, column, name)
    for row, (day, late, duration) in enumerate([(45000, 3e6, 1.5), (45001, 1e10, 0.0625)], start=1):
        sheet.write(row, 0, day, date)
        sheet.write(row, 1, late, date)
        sheet.write(row, 2, duration, took)
    buffer = io.BytesIO()
    book.save(buffer)
    assert upload(server, "times", "times.xls", buffer.getvalue()).status_code == 200
    got = server.sql_ok("SELECT day, late, took FROM files.times ORDER BY day")["data"]
    assert got == [["2023-03-15 00:00:00.000000", 3e6, "36:00:00"],
                   ["2023-03-16 00:00:00.000000", 1e10, "1:30:00"]], got
    assert upload(server, "small_pdf", "s.pdf", pdf([["hello"]])).status_code == 200


def test_an_xls_file_that_claims_billions_of_rows_is_refused(start_limited_server):
    """calamine reserves room for the rows a sheet's DIMENSIONS record claims before it reads a
    cell: four billion rows from a 6 KB file. The reading happens in a process of its own, which
    dies alone; the server refuses the file and goes on."""
    server = start_limited_server()
    body = bytearray(xls({"S": [["a"], [1]]}))
    at = body.find(bytes([0x00, 0x02, 0x0E, 0x00]))
    assert at > 0, "a DIMENSIONS record"
    body[at + 8:at + 12] = (0xFFFFFFFF).to_bytes(4, "little")
    body[at + 14:at + 16] = (255).to_bytes(2, "little")
    problem(upload(server, "claims", "claims.xls", bytes(body)), 400, "could not be read within")
    assert server.death() is None
    assert upload(server, "fine", "fine.xls", xls({"S": [["a"], [1]]})).status_code == 200
    assert server.sql_ok("SELECT a FROM files.fine")["data"] == [[1]]


class _Files(http.server.BaseHTTPRequestHandler):
    """Serves the test's files by path; `/moved` redirects, anything else is 404."""

    served: dict[str, tuple[str, bytes]] = {}

    def do_GET(self):  # noqa: N802 (the handler's name)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/data.csv")
            self.end_headers()
            return
        found = self.served.get(self.path)
        if found is None:
            self.send_error(404)
            return
        content_type, body = found
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def file_host():
    _Files.served = {
        "/data.csv": ("text/csv", b"a,b\n1,x\n2,y\n"),
        "/report": ("application/pdf", pdf([["Fetched from a URL"]])),
    }
    host = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{host.server_address[1]}"
    host.shutdown()


def test_files_are_fetched_from_urls_through_the_egress_policy(start_server, file_host):
    server = start_server()
    put = lambda name, body: requests.put(files_url(server, name), json=body, timeout=30)  # noqa: E731
    assert put("fetched", {"source_type": "url", "source": f"{file_host}/data.csv"}).status_code == 200
    assert server.sql_ok("SELECT a, b FROM files.fetched ORDER BY a")["data"] == [[1, "x"], [2, "y"]]
    # No extension in the URL: the answer's Content-Type says PDF.
    assert put("doc", {"source_type": "url", "source": f"{file_host}/report"}).status_code == 200
    assert "Fetched from a URL" in server.sql_ok("SELECT content FROM files.doc")["data"][0][0]
    exists = put("fetched", {"source_type": "url", "source": f"{file_host}/data.csv"})
    assert exists.status_code == 400 and exists.json()["title"] == "File already exists", exists.text
    missing = put("missing", {"source_type": "url", "source": f"{file_host}/nothing.csv"})
    assert missing.status_code == 400 and "404" in missing.json()["detail"], missing.text
    # Redirects are not followed: the URL checked is the URL fetched.
    moved = put("moved", {"source_type": "url", "source": f"{file_host}/moved"})
    assert moved.status_code == 400 and "302" in moved.json()["detail"], moved.text
    no_source = put("x", {"source_type": "url"})
    assert no_source.status_code == 400 and no_source.json()["title"] == "Missed file source"
    bad = put("x", {"source_type": "url", "source": "not a url"})
    assert bad.status_code == 400 and "not valid" in bad.json()["detail"], bad.text
    # The hosted edition's egress policy keeps tenants off the operator's network.
    hosted, keys = hosted_server(start_server, 'edition = "hosted"\n', "alice")
    refused = requests.put(files_url(hosted, "f"), timeout=30,
                           json={"source_type": "url", "source": f"{file_host}/data.csv"},
                           headers={"Authorization": f"Bearer {keys['alice']}"})
    assert refused.status_code == 400 and refused.json()["title"] == "Invalid URL", refused.text
    assert "egress policy" in refused.json()["detail"]
    # And the operator can turn URL uploads off.
    off = start_server("[files]\nurl_upload = false\n")
    disabled = requests.put(files_url(off, "f"), timeout=30,
                            json={"source_type": "url", "source": f"{file_host}/data.csv"})
    assert disabled.status_code == 400 and "files.url_upload" in disabled.json()["detail"], disabled.text


# What an attack on the readers found: each a small file that made one reader build far more
# than the caps allow before any check ran. The server runs under an address-space limit, so
# a runaway allocation kills it and fails the test.

def _raw_pdf(objects: list[tuple[int, bytes]]) -> bytes:
    out = bytearray(b"%PDF-1.5\n")
    offsets = {}
    for number, body in objects:
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    size = max(offsets) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for i in range(1, size):
        out += b"%010d 00000 n \n" % offsets[i] if i in offsets else b"0000000000 00000 f \n"
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def _stream(entries: bytes, data: bytes) -> bytes:
    packed = zlib.compress(data, 9)
    return (b"<< " + entries + b" /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed)
            + packed + b"\nendstream")


def _shared_strings_xlsx(strings: list[str], rows: int) -> bytes:
    """One sheet whose every row names shared string 0."""
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    cells = '<row r="1"><c r="A1" t="s"><v>1</v></c></row>' + "".join(
        f'<row r="{r}"><c r="A{r}" t="s"><v>0</v></c></row>' for r in range(2, rows + 2))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("_rels/.rels", f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
                   f'relationships"><Relationship Id="rId1" Type="{rel}/officeDocument" '
                   'Target="xl/workbook.xml"/></Relationships>')
        z.writestr("xl/workbook.xml", f'<workbook {ns} xmlns:r="{rel}"><sheets><sheet name="S" sheetId="1" '
                   'r:id="rId1"/></sheets></workbook>')
        z.writestr("xl/_rels/workbook.xml.rels", '<Relationships xmlns="http://schemas.openxmlformats.org/'
                   f'package/2006/relationships"><Relationship Id="rId1" Type="{rel}/worksheet" '
                   f'Target="worksheets/sheet1.xml"/><Relationship Id="rId2" Type="{rel}/sharedStrings" '
                   'Target="sharedStrings.xml"/></Relationships>')
        z.writestr("xl/worksheets/sheet1.xml", f"<worksheet {ns}><sheetData>{cells}</sheetData></worksheet>")
        z.writestr("xl/sharedStrings.xml", f"<sst {ns}>" + "".join(f"<si><t>{s}</t></si>" if s else "<si/>"
                                                                    for s in strings) + "</sst>")
    return buffer.getvalue()


def test_files_that_expand_inside_their_readers_are_refused(start_limited_server):
    server = start_limited_server("[files]\nmax_decoded_mb = 64\n")
    # A 1 MB shared string named by 20,000 cells: 20 GB if every cell were copied at once.
    book = _shared_strings_xlsx(["A" * 1_000_000, "h"], 20_000)
    assert len(book) < 200_000
    problem(upload(server, "strings", "b.xlsx", book), 400, "files.max_decoded_mb")
    # An object stream of 200 members at one offset, each a copy of a 500,000-number array.
    header = " ".join(f"{10 + i} 0" for i in range(200)).encode() + b"\n"
    members = _stream(b"/Type /ObjStm /N 200 /First %d" % len(header), header + b"[" + b"0 " * 500_000 + b"]")
    objstm = _raw_pdf([(1, b"<< /Type /Catalog /Pages 2 0 R >>"),
                       (2, b"<< /Type /Pages /Kids [] /Count 0 >>"), (3, members)])
    problem(upload(server, "objstm", "o.pdf", objstm), 400, "PDF")
    # A page whose content inflates to 30 million operands.
    page = _raw_pdf([
        (1, b"<< /Type /Catalog /Pages 2 0 R >>"), (2, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
        (3, b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>"),
        (4, _stream(b"", b"BT /F1 12 Tf (Hello) Tj ET\n" + b"0 " * 30_000_000 + b"Tj\n")),
        (5, b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")])
    problem(upload(server, "operands", "p.pdf", page), 400, "PDF")
    # A file name repeated in every chunk's metadata.
    body = ("word " * 100_000).encode()
    named = requests.put(files_url(server, "named"), timeout=60,
                         files={"file": ("x.txt", body, "text/plain"),
                                "original_file_name": (None, "\x01" * 200_000 + ".txt")})
    assert named.status_code == 200, named.text
    meta = json.loads(server.sql_ok("SELECT metadata FROM files.named LIMIT 1")["data"][0][0])
    assert len(meta["source_file"]) == 255
    assert server.death() is None
    assert server.sql_ok("SELECT 1")["data"] == [[1]]


def test_concurrent_workbooks_hold_their_memory_before_reading_it(start_limited_server):
    """Each of these 100 KB workbooks has 12.5 million empty shared strings, about 500 MiB once
    read: checked one by one they all fit, read at once they would not. The memory is held
    for each before calamine reads it, so some are refused and the server stays up."""
    server = start_limited_server()
    book = _shared_strings_xlsx([""] * 12_500_000, 1)
    assert len(book) < 500_000
    statuses = []

    def send(i: int) -> None:
        r = requests.put(files_url(server, f"book{i}"), timeout=120,
                         files={"file": ("b.xlsx", book, "application/octet-stream")})
        statuses.append(r.status_code)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.death() is None
    assert len(statuses) == 8 and all(s in (200, 400, 429, 503) for s in statuses), statuses
    assert any(s != 200 for s in statuses), statuses
    assert server.sql_ok("SELECT 1")["data"] == [[1]]
