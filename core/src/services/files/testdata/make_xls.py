"""Writes the `.xls` workbooks the upload tests read (run with xlwt installed:
`python make_xls.py`). Excel 97-2003 files are binary (BIFF8 in an OLE2 container) and no
Rust crate writes them, so the tests read these, made once by xlwt, the writer pandas used."""

import datetime

import xlwt

DATE = xlwt.easyxf(num_format_str="yyyy-mm-dd")
TIME = xlwt.easyxf(num_format_str="yyyy-mm-dd hh:mm:ss")


def prices(sheet):
    # A header with one empty cell, whole numbers, fractions, text, booleans, dates, and a
    # missing value; a row with nothing in it is skipped.
    for column, name in enumerate(["id", "name", "price", "ok", "day", "", "at"]):
        if name:
            sheet.write(0, column, name)
    rows = [
        (1, "apple", 1.5, True, datetime.date(2024, 1, 2), "x", datetime.datetime(2024, 1, 2, 3, 4, 5)),
        (2, "pear", 2, False, datetime.date(2024, 2, 29), None, None),
        (3, None, 3.25, True, datetime.date(1999, 12, 31), "z", datetime.datetime(2000, 1, 1)),
    ]
    for r, row in enumerate(rows, start=1):
        for c, value in enumerate(row):
            if value is None:
                continue
            if isinstance(value, datetime.datetime):
                sheet.write(r, c, value, TIME)
            elif isinstance(value, datetime.date):
                sheet.write(r, c, value, DATE)
            else:
                sheet.write(r, c, value)
    sheet.write(5, 0, 4)
    sheet.write(5, 1, "plum")


book = xlwt.Workbook()
prices(book.add_sheet("Prices"))
book.save("one.xls")

book = xlwt.Workbook()
prices(book.add_sheet("Prices"))
notes = book.add_sheet("Sales 2024")
notes.write(0, 0, "x")
notes.write(1, 0, 1)
book.add_sheet("Empty")
book.save("book.xls")
