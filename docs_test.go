package paymentsd_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// A page is one Markdown file of the documentation: README.md,
// BENCHMARKS.md or a file under docs/. Its prose is its lines outside code
// fences, with code spans blanked, so that an example in a fence or in
// backticks is never read as a heading or a link.
type page struct {
	path     string   // relative to the repository root, slash-separated
	prose    []string // the lines outside fences, code spans replaced by "code"
	lineNo   []int    // the line number of each prose line
	openAt   int      // the line of a fence that never closes, or 0
	reopened []int    // lines inside a fence that open another: it was left open
	headings []heading
}

type heading struct {
	level  int
	anchor string
	line   int
}

var (
	headingRE  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// A contents entry is a list item, not indented, that begins with a
	// link to an anchor of its page.
	contentsRE = regexp.MustCompile(`^[-*] \[[^\]]*\]\(#([^)\s]+)\)`)
)

// docsPages reads README.md, BENCHMARKS.md and every .md file under docs/.
func docsPages(t *testing.T) map[string]*page {
	t.Helper()
	paths := []string{"README.md", "BENCHMARKS.md"}
	err := filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			paths = append(paths, filepath.ToSlash(p))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]*page{}
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pages[p] = parsePage(p, string(src))
	}
	return pages
}

// parsePage splits a page into its prose and its headings. A fence opens
// with three or more backticks. It closes with a line of at least as many
// and nothing else.
func parsePage(path, src string) *page {
	pg := &page{path: path}
	fence := ""
	seen := map[string]int{}
	for i, line := range strings.Split(src, "\n") {
		n := i + 1
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			switch {
			case strings.HasPrefix(trimmed, fence) && strings.TrimRight(trimmed, "` ") == "":
				fence, pg.openAt = "", 0
			case strings.HasPrefix(trimmed, fence):
				pg.reopened = append(pg.reopened, n)
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
			pg.openAt = n
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			a := anchor(m[2])
			if k := seen[a]; k > 0 {
				a = fmt.Sprintf("%s-%d", a, k)
			}
			seen[anchor(m[2])]++
			pg.headings = append(pg.headings, heading{level: len(m[1]), anchor: a, line: n})
		}
		pg.prose = append(pg.prose, codeSpanRE.ReplaceAllString(line, "code"))
		pg.lineNo = append(pg.lineNo, n)
	}
	return pg
}

// anchor is GitHub's anchor of a heading: lower case, punctuation dropped,
// spaces as dashes.
func anchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func (pg *page) hasAnchor(a string) bool {
	return slices.ContainsFunc(pg.headings, func(h heading) bool { return h.anchor == a })
}

// TestDocs_FencesClose fails on a code fence that is never closed. An open
// fence swallows what follows into one code block. A line inside a fence
// that begins with its backticks and more text, such as "```sh", is the
// next fence's opening: the fence before it was left open.
func TestDocs_FencesClose(t *testing.T) {
	for _, pg := range docsPages(t) {
		if pg.openAt != 0 {
			t.Errorf("%s:%d: a code fence opens here and never closes", pg.path, pg.openAt)
		}
		for _, n := range pg.reopened {
			t.Errorf("%s:%d: a fence opens inside another; the one before it was never closed", pg.path, n)
		}
	}
}

// TestDocs_ContentsListTheSections checks each page's contents list
// against its sections. The contents list is the run of list items, not
// indented, that link to anchors of the page before its first ## heading.
// It must name every ## heading, in order, and nothing else. Every page
// under docs/ with two or more ## sections must have one.
func TestDocs_ContentsListTheSections(t *testing.T) {
	for _, pg := range docsPages(t) {
		var listed, sections []string
		first := len(pg.prose)
		for _, h := range pg.headings {
			if h.level == 2 {
				sections = append(sections, h.anchor)
				first = min(first, slices.Index(pg.lineNo, h.line))
			}
		}
		for _, line := range pg.prose[:first] {
			if m := contentsRE.FindStringSubmatch(line); m != nil {
				listed = append(listed, m[1])
			}
		}
		switch {
		case len(listed) == 0 && len(sections) >= 2 && strings.HasPrefix(pg.path, "docs/"):
			t.Errorf("%s: %d sections and no contents list; it should list %q", pg.path, len(sections), sections)
		case len(listed) > 0 && !slices.Equal(listed, sections):
			t.Errorf("%s: the contents list names %q; the ## sections are %q", pg.path, listed, sections)
		}
	}
}

// TestDocs_LinksResolve checks every link of the documentation that is not
// a URL. A #anchor must name a heading of its page. A relative path must
// name a file or directory of the repository, and a .md file's #anchor
// one of that file's headings. The documentation stands alone, so no link
// leaves the repository.
func TestDocs_LinksResolve(t *testing.T) {
	pages := docsPages(t)
	for _, pg := range pages {
		for i, line := range pg.prose {
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				where := fmt.Sprintf("%s:%d: link %q", pg.path, pg.lineNo[i], target)
				file, frag, _ := strings.Cut(target, "#")
				if file == "" {
					if !pg.hasAnchor(frag) {
						t.Errorf("%s: no heading of this page has that anchor", where)
					}
					continue
				}
				dest := filepath.ToSlash(filepath.Join(filepath.Dir(pg.path), file))
				if dest == ".." || strings.HasPrefix(dest, "../") {
					t.Errorf("%s: leaves the repository", where)
					continue
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: %s does not exist", where, dest)
					continue
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				other, ok := pages[dest]
				if !ok {
					src, err := os.ReadFile(dest)
					if err != nil {
						t.Fatal(err)
					}
					other = parsePage(dest, string(src))
				}
				if !other.hasAnchor(frag) {
					t.Errorf("%s: no heading of %s has the anchor %q", where, dest, frag)
				}
			}
		}
	}
}

// TestDocs_TestingNamesEveryFuzzTarget checks that docs/testing.md gives
// the command of every fuzz target in the tree's _test.go files. The
// command is go test's -fuzz with the target's name anchored, then its
// package, from the directory of its module (-C).
func TestDocs_TestingNamesEveryFuzzTarget(t *testing.T) {
	doc, err := os.ReadFile("docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	fuzzRE := regexp.MustCompile(`(?m)^func (Fuzz\w*)\(`)
	found := 0
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range fuzzRE.FindAllStringSubmatch(string(src), -1) {
			found++
			cmd := fmt.Sprintf("go test -fuzz='^%s$' ./%s", m[1], filepath.ToSlash(filepath.Dir(p)))
			if mod, rest, ok := strings.Cut(filepath.ToSlash(filepath.Dir(p)), "/"); ok && slices.Contains(modules, mod) {
				cmd = fmt.Sprintf("go test -C %s -fuzz='^%s$' ./%s", mod, m[1], rest) // a package of a nested module
			}
			if !strings.Contains(string(doc), cmd) {
				t.Errorf("docs/testing.md does not give %s of %s: want %s", m[1], p, cmd)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("found no fuzz target in the tree")
	}
}

// TestReadme_LinksEveryDocsPage checks that the README links every page
// under docs/, so that no page is found only by chance.
func TestReadme_LinksEveryDocsPage(t *testing.T) {
	pages := docsPages(t)
	linked := map[string]bool{}
	for _, line := range pages["README.md"].prose {
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			file, _, _ := strings.Cut(m[1], "#")
			linked[file] = true
		}
	}
	for p := range pages {
		if p != "README.md" && !linked[p] {
			t.Errorf("README.md does not link %s", p)
		}
	}
}

// maxBenchmarksLines is how long BENCHMARKS.md may grow. The story behind
// its figures belongs in docs/design/performance.md.
const maxBenchmarksLines = 270

// runLineRE matches a line that names a run: "Run: ", the tool's command
// in backticks, then the date and "commit" with the commit's hash, such as
// "Run: `make bench`, 2026-12-03, commit f3d8cd2; ghz v0.120.0".
var runLineRE = regexp.MustCompile("^Run: `[^`]+`.*\\b\\d{4}-\\d{2}-\\d{2}\\b.*\\bcommit [0-9a-f]{7,40}\\b")

// TestDocs_BenchmarksIsAResultsPage keeps BENCHMARKS.md a page of results.
// It has at most maxBenchmarksLines lines. Every table in it is named by
// its run: between the table and the heading above it stands a line that
// runLineRE matches. A table inside a code fence is not a table.
func TestDocs_BenchmarksIsAResultsPage(t *testing.T) {
	src, err := os.ReadFile("BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range resultsPageProblems(string(src), maxBenchmarksLines) {
		t.Errorf("BENCHMARKS.md:%s", problem)
	}
}

// resultsPageProblems returns what keeps src from being a results page:
// more than maxLines lines, or a table with no run named in its section
// before it. Each problem begins with its line number.
func resultsPageProblems(src string, maxLines int) []string {
	var problems []string
	lines := strings.Split(src, "\n")
	if n := strings.Count(strings.TrimSuffix(src, "\n"), "\n") + 1; n > maxLines {
		problems = append(problems, fmt.Sprintf("%d: %d lines, more than %d; move the story to docs/design/performance.md", n, n, maxLines))
	}
	pg := parsePage("BENCHMARKS.md", src)
	named, inTable := false, false
	for _, n := range pg.lineNo {
		line := strings.TrimSpace(lines[n-1])
		isTable := strings.HasPrefix(line, "|")
		switch {
		case headingRE.MatchString(line):
			named = false
		case runLineRE.MatchString(line):
			named = true
		case isTable && !inTable && !named:
			problems = append(problems, fmt.Sprintf("%d: a table with no Run: line above it in its section, giving its tool in backticks, date and commit", n))
		}
		inTable = isTable
	}
	return problems
}

// TestDocs_ResultsPageProblems checks the rule of BENCHMARKS.md on small
// pages, good and bad.
func TestDocs_ResultsPageProblems(t *testing.T) {
	const run = "Run: `make bench`, 2026-12-03, commit f3d8cd2.\n"
	const table = "| a | b |\n|---|---|\n| 1 | 2 |\n"
	tests := []struct {
		name string
		src  string
		max  int
		want int // problems found
	}{
		{"a table after its run", "## A\n\n" + run + "\n" + table, 10, 0},
		{"two tables after one run", "## A\n\n" + run + "\n" + table + "\n" + table, 20, 0},
		{"a table without a run", "## A\n\n" + table, 10, 1},
		{"a run in the section before only", "## A\n\n" + run + "\n" + table + "\n## B\n\n" + table, 20, 1},
		{"a run after its table", "## A\n\n" + table + "\n" + run, 10, 1},
		{"a run without a commit", "## A\n\nRun: `make bench`, 2026-12-03.\n\n" + table, 10, 1},
		{"a run without a date", "## A\n\nRun: `make bench`, commit f3d8cd2.\n\n" + table, 10, 1},
		{"a run without its tool in backticks", "## A\n\nRun: make bench, 2026-12-03, commit f3d8cd2.\n\n" + table, 10, 1},
		{"a table in a code fence", "## A\n\n```\n" + table + "```\n", 10, 0},
		{"too long", "## A\n\n" + run + "\n" + table, 5, 1},
		{"exactly as long as allowed", "## A\n\n" + run + "\n" + table, 7, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resultsPageProblems(tt.src, tt.max)
			if len(got) != tt.want {
				t.Errorf("got %d problems %q, want %d", len(got), got, tt.want)
			}
		})
	}
}
