"""(filled by issue 14 phase 2)"""
